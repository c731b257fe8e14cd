//! Writing: events (each id once; a different event reusing a stored id goes to the
//! conflicts), dead letters, and what the new events add to the rollups, in one transaction.

use std::collections::{BTreeMap, HashMap, HashSet};

use mesh_core::{codec, Timestamp, WireMessage};
use sqlx::QueryBuilder;

use super::rows::{now_text, ConflictRow, DeadRow, EventRow, Identity};
use super::sql::statement_chunks;
use super::sql::{Dialect, POSTGRES, SQLITE};
use super::{Pool, Store, Written, IDS_PER_STATEMENT};
use crate::error::Error;

/// The start of an insert into `events`, in [`push_event_columns!`]'s order.
const INSERT_EVENTS: &str = "INSERT INTO events (id, routing_key, source, node, time, \
                             causation_id, schema, received_at, headers, body, publisher) ";
/// Binds an [`EventRow`]'s columns in `events`' order (the same in `event_conflicts` after
/// its own id): id, routing key, source, node, time, causation id, schema, received at,
/// headers, body, publisher. A macro, as [`with_pool!`] bodies are, so each backend gets its own types.
macro_rules! push_event_columns {
    ($b:ident, $d:ident, $row:expr) => {{
        let row: &EventRow = $row;
        $b.push_bind(row.id.as_str()).push_unseparated($d.uuid);
        $b.push_bind(row.routing_key.as_str());
        $b.push_bind(row.source.as_str());
        $b.push_bind(row.node.as_str());
        $b.push_bind(row.time.as_str()).push_unseparated($d.time);
        $b.push_bind(row.causation_id.as_deref());
        $b.push_bind(row.schema);
        $b.push_bind(row.received_at.as_str())
            .push_unseparated($d.time);
        $b.push_bind(row.headers.as_str())
            .push_unseparated($d.headers);
        $b.push_bind(row.body.as_str()).push_unseparated($d.body);
        $b.push_bind(row.publisher.as_deref());
    }};
}

impl Store {
    /// Records messages as events, as the logger would (each id once; a different event
    /// reusing a stored id goes to the conflicts, see [`Store::conflicts`]). Returns how many
    /// events were new; a message that breaks the contract fails the whole call with
    /// [`ErrorKind::InvalidMessage`](crate::ErrorKind::InvalidMessage) before anything is written. For imports and tests; the
    /// logger batches deliveries itself.
    pub async fn record_events(&self, messages: &[WireMessage]) -> Result<u64, Error> {
        self.record_events_arrived(messages, Timestamp::now()).await
    }

    /// [`Store::record_events`] as if the logger had stored them at `arrived` (their
    /// `received_at`, which retention goes by): for imports keeping their arrival, and tests
    /// of retention.
    pub async fn record_events_arrived(
        &self,
        messages: &[WireMessage],
        arrived: Timestamp,
    ) -> Result<u64, Error> {
        let received = crate::convert::time_to_text(arrived)?;
        let rows = messages
            .iter()
            .map(|message| {
                let envelope = codec::decode(message)
                    .map_err(|e| Error::options("a message is not an event").with_source(e))?;
                EventRow::new(envelope, message, &received).map_err(Error::options)
            })
            .collect::<Result<Vec<_>, _>>()?;
        let written = self
            .write(&rows, &[])
            .await
            .map_err(|e| Error::database("recording events", e))?;
        Ok(written.events)
    }

    /// Records messages as dead letters (each dead letter once). Returns how many were new.
    /// Their provenance is not judged (as by a logger not enforcing identity).
    pub async fn record_dead_letters(&self, messages: &[WireMessage]) -> Result<u64, Error> {
        self.record_dead_letters_judged(messages, None).await
    }

    /// Records messages as dead letters, each judged as a logger enforcing identity with
    /// `user_prefix` judges it (`Some`: untrusted unless
    /// [`mesh_core::provenance::dead_letter_trusted`]; `None`: not judged). Returns how many were
    /// new.
    pub async fn record_dead_letters_judged(
        &self,
        messages: &[WireMessage],
        user_prefix: Option<&str>,
    ) -> Result<u64, Error> {
        let received = now_text();
        let rows: Vec<DeadRow> = messages
            .iter()
            .map(|message| DeadRow::new(message, &received, None).judged(message, user_prefix))
            .collect();
        let written = self
            .write(&[], &rows)
            .await
            .map_err(|e| Error::database("recording dead letters", e))?;
        Ok(written.dead_letters)
    }

    /// Inserts rows in one transaction. A dead letter whose id is stored already is skipped
    /// (`ON CONFLICT DO NOTHING`); so is an event whose id is stored already with the same
    /// [`Identity`] (a redelivery or a resend), while one with another identity is a
    /// different event reusing the id and goes into `event_conflicts` (itself once per
    /// conflicting event). Two rows of one batch with the same id are decided the same way:
    /// the first is stored, the others are duplicates or conflicts of it. Returns the raw
    /// database error so the caller can tell a transient failure from a row the database
    /// refuses.
    pub(crate) async fn write(
        &self,
        events: &[EventRow],
        dead: &[DeadRow],
    ) -> Result<Written, sqlx::Error> {
        let mut written = Written::default();
        with_pool!(self, |pool, d| {
            // On SQLite the writer from the start (`BEGIN IMMEDIATE`, see the store's docs).
            let mut tx = match d.begin_write {
                Some(begin) => pool.begin_with(begin).await?,
                None => pool.begin().await?,
            };
            // On SQLite the common case first: every row new, so the inserts need not say
            // which (`RETURNING` each id costs a result row per event, which SQLite hands
            // from its worker thread one by one). They run in a savepoint: when fewer rows
            // went in than the batch holds, it is rolled back and the rows inserted again,
            // naming their ids, so the rows below know which were new.
            let mut all_new = true;
            // PostgreSQL inserts each id of the batch once (its first row), as `event_ids`
            // decides for the whole statement; SQLite's `ON CONFLICT` skips the later rows.
            let firsts: Vec<&EventRow> = if d.partitioned {
                let mut seen: HashSet<&str> = HashSet::new();
                events
                    .iter()
                    .filter(|row| seen.insert(row.id.as_str()))
                    .collect()
            } else {
                events.iter().collect()
            };
            let mut inserted: HashSet<String> = HashSet::new();
            // Where the ids come back cheaply with the insert (PostgreSQL, in the answer to
            // the statement), they are asked for at once, without a savepoint: one
            // statement, not three, and no subtransaction for the server to keep.
            let mut returned = false;
            if !events.is_empty() && d.cheap_returning {
                for chunk in statement_chunks(&firsts) {
                    let mut qb =
                        insert_events(d, chunk, |mut b, row| push_event_columns!(b, d, row));
                    qb.push(d.on_conflict).push(" RETURNING ").push(d.id_text);
                    let ids: Vec<String> = qb.build_query_scalar().fetch_all(&mut *tx).await?;
                    written.events += ids.len() as u64;
                    inserted.extend(ids);
                }
                all_new = written.events == events.len() as u64;
                returned = true;
            } else if !events.is_empty() {
                let mut attempt = sqlx::Connection::begin(&mut *tx).await?;
                let mut count = 0;
                for chunk in statement_chunks(&firsts) {
                    let mut qb =
                        insert_events(d, chunk, |mut b, row| push_event_columns!(b, d, row));
                    qb.push(d.on_conflict);
                    count += qb.build().execute(&mut *attempt).await?.rows_affected();
                }
                // An id goes in at most once, so as many rows as the batch holds means each
                // was new and each id different.
                all_new = count == events.len() as u64;
                if all_new {
                    attempt.commit().await?;
                    written.events = count;
                } else {
                    attempt.rollback().await?;
                }
            }
            if !all_new && !returned {
                for chunk in statement_chunks(&firsts) {
                    let mut qb =
                        insert_events(d, chunk, |mut b, row| push_event_columns!(b, d, row));
                    qb.push(d.on_conflict).push(" RETURNING ").push(d.id_text);
                    let ids: Vec<String> = qb.build_query_scalar().fetch_all(&mut *tx).await?;
                    written.events += ids.len() as u64;
                    inserted.extend(ids);
                }
            }

            // The rows that may not be the stored event: those not inserted, and every row
            // of an id the batch holds more than once (only one of them was inserted). None
            // when every row was inserted (the common case): their ids were all new and
            // all different.
            let suspects: Vec<&EventRow> = if all_new {
                Vec::new()
            } else {
                let mut per_id: HashMap<&str, usize> = HashMap::new();
                for row in events {
                    *per_id.entry(row.id.as_str()).or_default() += 1;
                }
                events
                    .iter()
                    .filter(|row| !inserted.contains(&row.id) || per_id[row.id.as_str()] > 1)
                    .collect()
            };
            if !suspects.is_empty() {
                let mut ids: Vec<&str> = suspects.iter().map(|row| row.id.as_str()).collect();
                ids.sort_unstable();
                ids.dedup();
                let mut stored: HashMap<String, Identity> = HashMap::new();
                for chunk in ids.chunks(IDS_PER_STATEMENT) {
                    let mut qb = QueryBuilder::new(format!(
                        "SELECT {} FROM events WHERE id IN (",
                        d.identity_columns
                    ));
                    let mut list = qb.separated(", ");
                    for id in chunk {
                        list.push_bind(*id).push_unseparated(d.uuid);
                    }
                    qb.push(")");
                    let rows: Vec<(String, String, String, String)> =
                        qb.build_query_as().fetch_all(&mut *tx).await?;
                    for (id, routing_key, source, body) in rows {
                        stored.insert(id, Identity::of(&routing_key, &source, &body));
                    }
                }
                let conflicts: Vec<ConflictRow> = suspects
                    .into_iter()
                    .filter_map(|row| {
                        // Inserted or found above, in this transaction: always stored.
                        let stored = stored.get(&row.id)?;
                        let identity = row.identity();
                        (identity != *stored).then(|| ConflictRow::new(row, &identity))
                    })
                    .collect();
                for chunk in statement_chunks(&conflicts) {
                    let mut qb = QueryBuilder::new(
                        "INSERT INTO event_conflicts (id, event_id, routing_key, source, node, \
                         time, causation_id, schema, received_at, headers, body, publisher, \
                         body_sha256) ",
                    );
                    qb.push_values(chunk, |mut b, row| {
                        b.push_bind(row.id.as_str()).push_unseparated(d.uuid);
                        push_event_columns!(b, d, &row.event);
                        b.push_bind(row.body_sha256.as_str());
                    });
                    qb.push(" ON CONFLICT (id) DO NOTHING");
                    written.conflicts += qb.build().execute(&mut *tx).await?.rows_affected();
                }
            }

            // Each inserted event into its minute's rollup, after the inserts: a transaction
            // takes rollup rows only once it waits for no event row any more, and in one
            // order (sorted), so two writers never wait for each other in a cycle.
            let rollups = rollups(events, (!all_new).then_some(&inserted));
            for chunk in statement_chunks(&rollups) {
                let mut qb = QueryBuilder::new(
                    "INSERT INTO event_rollups (minute, routing_key, source, events) ",
                );
                qb.push_values(chunk, |mut b, ((minute, key, source), n)| {
                    b.push_bind(minute.as_str()).push_unseparated(d.time);
                    b.push_bind(key.as_str());
                    b.push_bind(source.as_str());
                    b.push_bind(*n);
                });
                qb.push(
                    " ON CONFLICT (minute, routing_key, source) \
                     DO UPDATE SET events = event_rollups.events + excluded.events",
                );
                qb.build().execute(&mut *tx).await?;
            }

            for chunk in statement_chunks(dead) {
                let mut qb = QueryBuilder::new(
                    "INSERT INTO dead_letters (id, event_id, routing_key, reason, attempts, \
                     last_error, queue, dead_at, received_at, content_type, message_id, \
                     amqp_timestamp, headers, body, user_id, untrusted) ",
                );
                qb.push_values(chunk, |mut b, row| {
                    b.push_bind(row.id.as_str()).push_unseparated(d.uuid);
                    b.push_bind(row.event_id.as_deref())
                        .push_unseparated(d.uuid);
                    b.push_bind(row.routing_key.as_str());
                    b.push_bind(row.reason.as_deref());
                    b.push_bind(row.attempts);
                    b.push_bind(row.last_error.as_deref());
                    b.push_bind(row.queue.as_deref());
                    b.push_bind(row.dead_at.as_str()).push_unseparated(d.time);
                    b.push_bind(row.received_at.as_str())
                        .push_unseparated(d.time);
                    b.push_bind(row.content_type.as_deref());
                    b.push_bind(row.message_id.as_deref());
                    b.push_bind(row.amqp_timestamp);
                    b.push_bind(row.headers.as_str())
                        .push_unseparated(d.headers);
                    b.push_bind(row.body.as_slice());
                    b.push_bind(row.user_id.as_deref());
                    b.push_bind(row.untrusted);
                });
                qb.push(" ON CONFLICT (id) DO NOTHING");
                written.dead_letters += qb.build().execute(&mut *tx).await?.rows_affected();
            }
            tx.commit().await?;
        });
        Ok(written)
    }
}

/// An insert of `rows` into `events`, to be ended by the dialect's `on_conflict`. On
/// PostgreSQL, whose `events` is partitioned by arrival and so cannot key on the id alone,
/// each id is first inserted into `event_ids` (decision 0022): only the rows whose id went in
/// there are inserted into `events`, and the statement's count (or `RETURNING`) is theirs.
fn insert_events<'a, DB, F>(d: &Dialect, rows: &'a [&EventRow], push: F) -> QueryBuilder<'a, DB>
where
    DB: sqlx::Database,
    F: FnMut(sqlx::query_builder::Separated<'_, 'a, DB, &'static str>, &'a &EventRow),
{
    if d.partitioned {
        let mut qb = QueryBuilder::new(
            "WITH v (id, routing_key, source, node, time, causation_id, schema, received_at, \
             headers, body, publisher) AS (",
        );
        qb.push_values(rows, push);
        qb.push(
            "), fresh AS (INSERT INTO event_ids (id, received_at) \
             SELECT id, received_at FROM v ON CONFLICT (id) DO NOTHING RETURNING id) ",
        );
        qb.push(INSERT_EVENTS)
            .push("SELECT v.* FROM v JOIN fresh USING (id)");
        qb
    } else {
        let mut qb = QueryBuilder::new(INSERT_EVENTS);
        qb.push_values(rows, push);
        qb
    }
}

/// What the inserted events add to the rollups: per (minute, key, source), sorted. `inserted`
/// names the rows inserted, `None` when all were (and all their ids differ); an id the batch
/// holds more than once counts once (its first row is the one inserted).
fn rollups(
    events: &[EventRow],
    inserted: Option<&HashSet<String>>,
) -> Vec<((String, String, String), i64)> {
    let mut counted: HashSet<&str> = HashSet::new();
    // Keyed by borrowed text: the minute's text is made once per rollup row, not per event.
    let mut rollups: BTreeMap<(&str, &str, &str), i64> = BTreeMap::new();
    for row in events {
        if let Some(inserted) = inserted {
            if !inserted.contains(&row.id) || !counted.insert(row.id.as_str()) {
                continue;
            }
        }
        // The stored time form is fixed-width: its first 16 characters name the minute.
        let Some(minute) = row.time.get(..16) else {
            continue;
        };
        *rollups
            .entry((minute, row.routing_key.as_str(), row.source.as_str()))
            .or_default() += 1;
    }
    rollups
        .into_iter()
        .map(|((minute, key, source), n)| {
            (
                (
                    format!("{minute}:00.000000Z"),
                    key.to_owned(),
                    source.to_owned(),
                ),
                n,
            )
        })
        .collect()
}
