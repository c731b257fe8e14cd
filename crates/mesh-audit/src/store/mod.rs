//! The store: the audit trail and the dead letters, in SQLite or PostgreSQL.
//!
//! One `Store` type over either backend. Both have the same tables (`events`,
//! `event_conflicts`, `dead_letters`) created by their own migrations (`migrations/sqlite`, `migrations/postgres`), embedded in
//! the binary and applied by [`Store::open`]. The SQL is shared ([`sql`]); only casts and
//! select lists differ.

mod hint;
mod rows;
mod sql;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::str::FromStr;
use std::time::Duration;

use mesh_core::{codec, DeadReason, EventId, Timestamp, WireMessage};
use sqlx::migrate::Migrator;
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};
use sqlx::QueryBuilder;
use tracing::{debug, info};

use crate::convert::{time_from_text, time_to_text};
use crate::error::{Error, ErrorKind};
use crate::options::{Backend, StoreOptions, STORE_URL_HINT};
use crate::record::{
    CausationNode, CausationTree, ConflictRecord, Counts, DeadLetterGroup, DeadLetterId,
    DeadLetterQuery, DeadLetterRecord, EventQuery, EventRecord, Flow, Found, MAX_TREE_NODES,
};

use rows::{
    conflict_record, dead_record, event_record, ConflictRow, ConflictTuple, DeadTuple, EventTuple,
    Identity,
};
pub(crate) use rows::{now_text, DeadRow, EventRow};
use sql::{statement_chunks, Cursor, Dialect, POSTGRES, SQLITE};

static SQLITE_MIGRATIONS: Migrator = sqlx::migrate!("migrations/sqlite");
static POSTGRES_MIGRATIONS: Migrator = sqlx::migrate!("migrations/postgres");

/// The start of an insert into `events`, in [`push_event_columns!`]'s order.
const INSERT_EVENTS: &str = "INSERT INTO events (id, routing_key, source, node, time, \
                             causation_id, schema, received_at, headers, body, publisher) ";
/// Ids per `IN (…)` list.
const IDS_PER_STATEMENT: usize = 500;

#[derive(Debug, Clone)]
enum Pool {
    Sqlite(SqlitePool),
    Postgres(PgPool),
}

/// Runs `$body` with `$pool` bound to the concrete pool and `$d` to its [`Dialect`]: the body
/// is compiled once per backend, so each gets its own placeholders (`?` or `$n`) and types.
macro_rules! with_pool {
    ($store:expr, |$pool:ident, $d:ident| $body:expr) => {
        match &$store.pool {
            Pool::Sqlite($pool) => {
                let $d: &Dialect = &SQLITE;
                $body
            }
            Pool::Postgres($pool) => {
                let $d: &Dialect = &POSTGRES;
                $body
            }
        }
    };
}

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

/// The audit store. Cheap to clone: clones share one connection pool.
#[derive(Debug, Clone)]
pub struct Store {
    pool: Pool,
    options: StoreOptions,
}

/// What one write stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Written {
    /// Event rows inserted.
    pub(crate) events: u64,
    /// Conflict rows inserted: events reusing the id of a different stored event, first
    /// seen. The event rows neither inserted nor conflicts were stored already (duplicates).
    pub(crate) conflicts: u64,
    /// Dead-letter rows inserted.
    pub(crate) dead_letters: u64,
}

impl Store {
    /// Connects and brings the schema up to date (embedded migrations; safe to run from
    /// several processes at once).
    pub async fn open(options: StoreOptions) -> Result<Store, Error> {
        let url = options.get_url();
        let pool = match options.backend() {
            Backend::Sqlite => {
                let mut connect = SqliteConnectOptions::from_str(url)
                    .map_err(|e| {
                        Error::options(format!("store URL `{}`", options.redacted_url()))
                            .with_source(e)
                            .with_hint(STORE_URL_HINT)
                    })?
                    // WAL: readers (queries) never block the logger's writes.
                    .journal_mode(SqliteJournalMode::Wal)
                    .synchronous(if options.get_sqlite_synchronous_full() {
                        SqliteSynchronous::Full
                    } else {
                        SqliteSynchronous::Normal
                    })
                    .busy_timeout(Duration::from_secs(30));
                // Every connection to `:memory:` is a database of its own: keep exactly one.
                let memory = url.contains(":memory:") || url.contains("mode=memory");
                let mode = hint::sqlite_mode(url);
                let creates = !memory
                    && (mode == Some("rwc") || (mode.is_none() && options.get_create_if_missing()));
                if creates {
                    connect = connect.create_if_missing(true);
                    hint::create_parent_dir(connect.get_filename(), &options)?;
                }
                let mut pool = SqlitePoolOptions::new().max_connections(if memory {
                    1
                } else {
                    options.get_max_connections()
                });
                if memory {
                    pool = pool
                        .min_connections(1)
                        .idle_timeout(None)
                        .max_lifetime(None);
                }
                let path = connect.get_filename().to_path_buf();
                Pool::Sqlite(pool.connect_with(connect).await.map_err(|e| {
                    let hint = hint::sqlite(&path, &e, creates);
                    Error::database(format!("opening {}", options.redacted_url()), e)
                        .with_hint(hint)
                })?)
            }
            Backend::Postgres => {
                let connect = PgConnectOptions::from_str(url).map_err(|e| {
                    Error::options(format!("store URL `{}`", options.redacted_url()))
                        .with_source(e)
                        .with_hint(STORE_URL_HINT)
                })?;
                let (host, port, database) = (
                    connect.get_host().to_owned(),
                    connect.get_port(),
                    connect.get_database().map(str::to_owned),
                );
                Pool::Postgres(
                    PgPoolOptions::new()
                        .max_connections(options.get_max_connections())
                        .acquire_timeout(Duration::from_secs(30))
                        .connect_with(connect)
                        .await
                        .map_err(|e| {
                            let hint = hint::postgres(&host, port, database.as_deref(), &e);
                            Error::database(format!("connecting to {}", options.redacted_url()), e)
                                .with_hint(hint)
                        })?,
                )
            }
        };
        let store = Store { pool, options };
        if let Err(e) = store.migrate().await {
            store.close().await;
            return Err(e);
        }
        info!(store = %store.options.redacted_url(), backend = %store.backend(), "audit store open");
        Ok(store)
    }

    async fn migrate(&self) -> Result<(), Error> {
        let result = match &self.pool {
            Pool::Sqlite(pool) => SQLITE_MIGRATIONS.run(pool).await,
            Pool::Postgres(pool) => POSTGRES_MIGRATIONS.run(pool).await,
        };
        result.map_err(|e| {
            let hint = hint::migration(&e);
            Error::new(ErrorKind::Migration, "")
                .with_source(e)
                .with_hint(hint)
        })
    }

    /// The backend.
    pub fn backend(&self) -> Backend {
        self.options.backend()
    }

    /// The options it was opened with.
    pub fn options(&self) -> &StoreOptions {
        &self.options
    }

    /// Closes the pool, waiting for connections in use to be returned.
    pub async fn close(&self) {
        match &self.pool {
            Pool::Sqlite(pool) => pool.close().await,
            Pool::Postgres(pool) => pool.close().await,
        }
    }

    /// Records messages as events, as the logger would (each id once; a different event
    /// reusing a stored id goes to the conflicts, see [`Store::conflicts`]). Returns how many
    /// events were new; a message that breaks the contract fails the whole call with
    /// [`ErrorKind::InvalidMessage`] before anything is written. For imports and tests; the
    /// logger batches deliveries itself.
    pub async fn record_events(&self, messages: &[WireMessage]) -> Result<u64, Error> {
        let received = now_text();
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
    pub async fn record_dead_letters(&self, messages: &[WireMessage]) -> Result<u64, Error> {
        let received = now_text();
        let rows: Vec<DeadRow> = messages
            .iter()
            .map(|message| DeadRow::new(message, &received, None))
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
            let mut tx = pool.begin().await?;
            // The common case first: every row new, so the inserts need not say which
            // (`RETURNING` each id costs a result row per event, which SQLite hands from its
            // worker thread one by one). They run in a savepoint: when fewer rows went in
            // than the batch holds, it is rolled back and the rows inserted again, naming
            // their ids, so the rows below know which were new.
            let mut all_new = true;
            if !events.is_empty() {
                let mut attempt = sqlx::Connection::begin(&mut *tx).await?;
                let mut count = 0;
                for chunk in statement_chunks(events) {
                    let mut qb = QueryBuilder::new(INSERT_EVENTS);
                    qb.push_values(chunk, |mut b, row| push_event_columns!(b, d, row));
                    qb.push(" ON CONFLICT (id) DO NOTHING");
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
            let mut inserted: HashSet<String> = HashSet::new();
            if !all_new {
                for chunk in statement_chunks(events) {
                    let mut qb = QueryBuilder::new(INSERT_EVENTS);
                    qb.push_values(chunk, |mut b, row| push_event_columns!(b, d, row));
                    qb.push(" ON CONFLICT (id) DO NOTHING RETURNING ")
                        .push(d.id_text);
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
                     amqp_timestamp, headers, body, user_id) ",
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
                });
                qb.push(" ON CONFLICT (id) DO NOTHING");
                written.dead_letters += qb.build().execute(&mut *tx).await?.rows_affected();
            }
            tx.commit().await?;
        });
        Ok(written)
    }

    /// Events matching `query`, in its order, at most its limit (and, with a
    /// [`EventQuery::read_limit`], only those found among that many events read).
    ///
    /// A pattern is matched exactly as the broker routes: SQL narrows the rows by the
    /// pattern's literal prefix, the core matcher decides, and pages are fetched until the
    /// limit is filled or the rows run out, so the limit counts matching events only.
    pub async fn events(&self, query: &EventQuery) -> Result<Vec<EventRecord>, Error> {
        Ok(self.search(query).await?.events)
    }

    /// Events matching `query`, as [`Store::events`] finds them, with how many stored events
    /// were read and, when the query's [`EventQuery::read_limit`] stopped the search early,
    /// the cursor to go on from: a search page whose pattern no index serves reads a bounded
    /// number of rows, however few of them match.
    pub async fn search(&self, query: &EventQuery) -> Result<Found, Error> {
        let mut walk = Walk::new(query)?;
        while walk.more() {
            let (cursor, page) = (walk.cursor.clone(), walk.page_size());
            let rows: Vec<EventTuple> = with_pool!(self, |pool, d| {
                let mut qb = QueryBuilder::new(format!("SELECT {} FROM events", d.event_columns));
                sql::push_event_filters(&mut qb, d, query)?;
                sql::push_page(&mut qb, d, "time", query.order, cursor.as_ref(), page);
                qb.build_query_as()
                    .fetch_all(pool)
                    .await
                    .map_err(|e| Error::database("listing events", e))?
            });
            walk.take(rows, |row| (&row.4, &row.0, &row.1), event_record)?;
        }
        let walked = walk.finish()?;
        Ok(Found {
            events: walked.found,
            read: walked.read,
            stopped_after: walked.stopped_after,
        })
    }

    /// One page of a keyset walk over events, oldest first: at most `page` rows after
    /// `cursor` are read, and those whose key the query's pattern matches are returned with
    /// the cursor after the last row read, or `None` once the rows ran out (the query's limit
    /// and order aside).
    pub(crate) async fn event_page(
        &self,
        query: &EventQuery,
        cursor: Option<&Cursor>,
        page: usize,
    ) -> Result<(Vec<EventRecord>, Option<Cursor>), Error> {
        let rows: Vec<EventTuple> = with_pool!(self, |pool, d| {
            let mut qb = QueryBuilder::new(format!("SELECT {} FROM events", d.event_columns));
            sql::push_event_filters(&mut qb, d, query)?;
            sql::push_page(&mut qb, d, "time", crate::record::Order::Asc, cursor, page);
            qb.build_query_as()
                .fetch_all(pool)
                .await
                .map_err(|e| Error::database("listing events", e))?
        });
        let next = (rows.len() == page)
            .then(|| rows.last())
            .flatten()
            .map(|row| Cursor {
                time: row.4.clone(),
                id: row.0.clone(),
            });
        let found = rows
            .into_iter()
            .filter(|row| sql::key_passes(query.pattern.as_deref(), &row.1))
            .map(event_record)
            .collect::<Result<_, _>>()?;
        Ok((found, next))
    }

    /// The event with this id.
    pub async fn event(&self, id: EventId) -> Result<Option<EventRecord>, Error> {
        let row: Option<EventTuple> = with_pool!(self, |pool, d| {
            let mut qb = QueryBuilder::new(format!(
                "SELECT {} FROM events WHERE id = ",
                d.event_columns
            ));
            qb.push_bind(id.to_string()).push(d.uuid);
            qb.build_query_as()
                .fetch_optional(pool)
                .await
                .map_err(|e| Error::database("reading an event", e))?
        });
        row.map(event_record).transpose()
    }

    /// How many events match `query` (its limit and order aside).
    pub async fn count_events(&self, query: &EventQuery) -> Result<u64, Error> {
        match query.pattern.as_deref() {
            Some(pattern) if !sql::key_prefilter(pattern).is_exact() => Ok(self
                .event_counts_by_key(query)
                .await?
                .into_iter()
                .map(|(_, n)| n)
                .sum()),
            _ => {
                let count: i64 = with_pool!(self, |pool, d| {
                    let mut qb = QueryBuilder::new("SELECT count(*) FROM events");
                    sql::push_event_filters(&mut qb, d, query)?;
                    qb.build_query_scalar()
                        .fetch_one(pool)
                        .await
                        .map_err(|e| Error::database("counting events", e))?
                });
                Ok(u64::try_from(count).unwrap_or(0))
            }
        }
    }

    /// How many events match `query`, per routing key, by key.
    pub async fn event_counts_by_key(
        &self,
        query: &EventQuery,
    ) -> Result<Vec<(String, u64)>, Error> {
        let rows: Vec<(String, i64)> = with_pool!(self, |pool, d| {
            let mut qb = QueryBuilder::new("SELECT routing_key, count(*) FROM events");
            sql::push_event_filters(&mut qb, d, query)?;
            qb.push(" GROUP BY routing_key ORDER BY routing_key");
            qb.build_query_as()
                .fetch_all(pool)
                .await
                .map_err(|e| Error::database("counting events by key", e))?
        });
        let pattern = query.pattern.as_deref();
        Ok(rows
            .into_iter()
            .filter(|(key, _)| sql::key_passes(pattern, key))
            .map(|(key, n)| (key, u64::try_from(n).unwrap_or(0)))
            .collect())
    }

    /// Events per source and routing key from the rollups (by source, then key): those of the
    /// whole minutes from the one holding `since` to the one holding `until` (now when
    /// `None`), by their `x-time`. Reads at most one row per minute, key and source, never
    /// the events; [`Store::event_flows`] counts the events themselves, to the microsecond.
    pub async fn rolled_up_flows(
        &self,
        since: Timestamp,
        until: Option<Timestamp>,
    ) -> Result<Vec<Flow>, Error> {
        let rows: Vec<(String, String, i64)> = with_pool!(self, |pool, d| {
            let mut qb = QueryBuilder::new(
                "SELECT source, routing_key, CAST(sum(events) AS BIGINT) FROM event_rollups",
            );
            push_minutes(&mut qb, d, since, until)?;
            qb.push(" GROUP BY source, routing_key ORDER BY source, routing_key");
            qb.build_query_as()
                .fetch_all(pool)
                .await
                .map_err(|e| Error::database("reading the rollups", e))?
        });
        Ok(rows
            .into_iter()
            .map(|(source, key, n)| Flow {
                source,
                key,
                events: u64::try_from(n).unwrap_or(0),
            })
            .collect())
    }

    /// Events per minute from the rollups, oldest first: the minutes from the one holding
    /// `since` to the one holding `until` (now when `None`) that hold any event.
    pub async fn events_per_minute(
        &self,
        since: Timestamp,
        until: Option<Timestamp>,
    ) -> Result<Vec<(Timestamp, u64)>, Error> {
        let rows: Vec<(String, i64)> = with_pool!(self, |pool, d| {
            let mut qb = QueryBuilder::new(format!(
                "SELECT {}, CAST(sum(events) AS BIGINT) FROM event_rollups",
                d.minute
            ));
            push_minutes(&mut qb, d, since, until)?;
            qb.push(" GROUP BY minute ORDER BY minute");
            qb.build_query_as()
                .fetch_all(pool)
                .await
                .map_err(|e| Error::database("reading the rollups", e))?
        });
        rows.into_iter()
            .map(|(minute, n)| Ok((time_from_text(&minute)?, u64::try_from(n).unwrap_or(0))))
            .collect()
    }

    /// How many events match `query`, per source, by source.
    pub async fn event_counts_by_source(
        &self,
        query: &EventQuery,
    ) -> Result<Vec<(String, u64)>, Error> {
        let mut counts: Vec<(String, u64)> = Vec::new();
        for flow in self.event_flows(query).await? {
            match counts.last_mut() {
                Some((last, total)) if *last == flow.source => *total += flow.events,
                _ => counts.push((flow.source, flow.events)),
            }
        }
        Ok(counts)
    }

    /// How many events match `query`, per source and routing key: who emits what (the
    /// console's system map), by source, then key.
    pub async fn event_flows(&self, query: &EventQuery) -> Result<Vec<Flow>, Error> {
        let rows: Vec<(String, String, i64)> = with_pool!(self, |pool, d| {
            let mut qb = QueryBuilder::new("SELECT source, routing_key, count(*) FROM events");
            sql::push_event_filters(&mut qb, d, query)?;
            qb.push(" GROUP BY source, routing_key ORDER BY source, routing_key");
            qb.build_query_as()
                .fetch_all(pool)
                .await
                .map_err(|e| Error::database("counting events by source and key", e))?
        });
        let pattern = query.pattern.as_deref();
        Ok(rows
            .into_iter()
            .filter(|(_, key, _)| sql::key_passes(pattern, key))
            .map(|(source, key, n)| Flow {
                source,
                key,
                events: u64::try_from(n).unwrap_or(0),
            })
            .collect())
    }

    /// Events that reused the id of a different stored event (see [`ConflictRecord`]),
    /// matching `query` as [`Store::events`] does (its filters apply to the conflicting
    /// event), in its order, at most its limit.
    pub async fn conflicts(&self, query: &EventQuery) -> Result<Vec<ConflictRecord>, Error> {
        let mut walk = Walk::new(query)?;
        while walk.more() {
            let (cursor, page) = (walk.cursor.clone(), walk.page_size());
            let rows: Vec<ConflictTuple> = with_pool!(self, |pool, d| {
                let mut qb = QueryBuilder::new(format!(
                    "SELECT {} FROM event_conflicts",
                    d.conflict_columns
                ));
                sql::push_event_filters(&mut qb, d, query)?;
                sql::push_page(&mut qb, d, "time", query.order, cursor.as_ref(), page);
                qb.build_query_as()
                    .fetch_all(pool)
                    .await
                    .map_err(|e| Error::database("listing id conflicts", e))?
            });
            walk.take(rows, |row| (&row.5, &row.0, &row.2), conflict_record)?;
        }
        Ok(walk.finish()?.found)
    }

    /// How many events, id conflicts and dead letters the store holds.
    pub async fn counts(&self) -> Result<Counts, Error> {
        let (events, dead_letters, pending, conflicts): (i64, i64, i64, i64) =
            with_pool!(self, |pool, _d| {
                sqlx::query_as(
                    "SELECT (SELECT CAST(coalesce(sum(events), 0) AS BIGINT) FROM event_rollups), \
                     (SELECT count(*) FROM dead_letters), \
                     (SELECT count(*) FROM dead_letters WHERE redriven_at IS NULL), \
                     (SELECT count(*) FROM event_conflicts)",
                )
                .fetch_one(pool)
                .await
                .map_err(|e| Error::database("counting", e))?
            });
        let n = |v: i64| u64::try_from(v).unwrap_or(0);
        Ok(Counts {
            events: n(events),
            dead_letters: n(dead_letters),
            dead_letters_pending: n(pending),
            conflicts: n(conflicts),
        })
    }

    /// The causation tree of event `id`: its causes up to the oldest one stored, and
    /// everything it caused, transitively (see [`CausationTree`]). `None` when the event is
    /// not stored.
    pub async fn causation_tree(&self, id: EventId) -> Result<Option<CausationTree>, Error> {
        let Some(focus) = self.event(id).await? else {
            return Ok(None);
        };
        // Up: follow causation ids while they name stored events. A cycle (which only a
        // forged id can make) stops at the first event seen twice.
        let mut seen: HashSet<EventId> = HashSet::from([focus.id]);
        let mut ancestors: Vec<EventRecord> = Vec::new();
        let mut missing_cause = None;
        let mut current = focus.causation_id.clone();
        while let Some(cause) = current.take() {
            let parent = match cause.parse::<EventId>() {
                Ok(cause_id) if !seen.contains(&cause_id) => self.event(cause_id).await?,
                Ok(_) => break,
                Err(_) => None,
            };
            match parent {
                Some(parent) => {
                    seen.insert(parent.id);
                    current = parent.causation_id.clone();
                    ancestors.push(parent);
                }
                None => missing_cause = Some(cause),
            }
        }

        // Down: everything the focus caused, level by level.
        let mut children_of: HashMap<EventId, Vec<EventRecord>> = HashMap::new();
        let mut level = vec![focus.id];
        let mut total = 1 + ancestors.len();
        let mut truncated = false;
        while !level.is_empty() && !truncated {
            let mut next = Vec::new();
            for chunk in level.chunks(IDS_PER_STATEMENT) {
                for child in self.caused_by(chunk).await? {
                    if !seen.insert(child.id) {
                        continue;
                    }
                    if total == MAX_TREE_NODES {
                        truncated = true;
                        break;
                    }
                    total += 1;
                    next.push(child.id);
                    let parent = child
                        .causation_id
                        .as_deref()
                        .and_then(|c| c.parse::<EventId>().ok());
                    if let Some(parent) = parent {
                        children_of.entry(parent).or_default().push(child);
                    }
                }
                if truncated {
                    break;
                }
            }
            level = next;
        }

        fn build(
            event: EventRecord,
            children_of: &mut HashMap<EventId, Vec<EventRecord>>,
        ) -> CausationNode {
            let children = children_of
                .remove(&event.id)
                .unwrap_or_default()
                .into_iter()
                .map(|child| build(child, children_of))
                .collect();
            CausationNode { event, children }
        }
        let mut node = build(focus, &mut children_of);
        for ancestor in ancestors {
            node = CausationNode {
                event: ancestor,
                children: vec![node],
            };
        }
        Ok(Some(CausationTree {
            root: node,
            focus: id,
            missing_cause,
            truncated,
        }))
    }

    /// Events whose causation id is one of `ids`, oldest first.
    async fn caused_by(&self, ids: &[EventId]) -> Result<Vec<EventRecord>, Error> {
        let rows: Vec<EventTuple> = with_pool!(self, |pool, d| {
            let mut qb = QueryBuilder::new(format!(
                "SELECT {} FROM events WHERE causation_id IN (",
                d.event_columns
            ));
            let mut list = qb.separated(", ");
            for id in ids {
                list.push_bind(id.to_string());
            }
            qb.push(") ORDER BY time, id");
            qb.build_query_as()
                .fetch_all(pool)
                .await
                .map_err(|e| Error::database("reading caused events", e))?
        });
        rows.into_iter().map(event_record).collect()
    }

    /// Dead letters matching `query`, in its order, at most its limit.
    pub async fn dead_letters(
        &self,
        query: &DeadLetterQuery,
    ) -> Result<Vec<DeadLetterRecord>, Error> {
        Ok(self
            .dead_letter_page(query, None, query.limit)
            .await?
            .into_iter()
            .map(|(record, _, _)| record)
            .collect())
    }

    /// The dead letters matching `query` (its limit and order aside), counted per queue and
    /// reason, by queue then reason.
    pub async fn dead_letter_groups(
        &self,
        query: &DeadLetterQuery,
    ) -> Result<Vec<DeadLetterGroup>, Error> {
        let rows: Vec<(Option<String>, Option<String>, i64, i64)> = with_pool!(self, |pool, d| {
            let mut qb = QueryBuilder::new(
                "SELECT queue, reason, count(*), \
                     count(CASE WHEN redriven_at IS NULL THEN 1 END) FROM dead_letters",
            );
            sql::push_dead_filters(&mut qb, d, query)?;
            qb.push(" GROUP BY queue, reason ORDER BY queue, reason");
            qb.build_query_as()
                .fetch_all(pool)
                .await
                .map_err(|e| Error::database("counting dead letters by group", e))?
        });
        Ok(rows
            .into_iter()
            .map(|(queue, reason, count, pending)| DeadLetterGroup {
                queue,
                reason: reason.as_deref().and_then(DeadReason::parse),
                count: u64::try_from(count).unwrap_or(0),
                pending: u64::try_from(pending).unwrap_or(0),
            })
            .collect())
    }

    /// The dead letter with this id.
    pub async fn dead_letter(&self, id: DeadLetterId) -> Result<Option<DeadLetterRecord>, Error> {
        Ok(self
            .dead_letter_full(id)
            .await?
            .map(|(record, _, _)| record))
    }

    /// How many dead letters match `query` (its limit and order aside).
    pub async fn count_dead_letters(&self, query: &DeadLetterQuery) -> Result<u64, Error> {
        let count: i64 = with_pool!(self, |pool, d| {
            let mut qb = QueryBuilder::new("SELECT count(*) FROM dead_letters");
            sql::push_dead_filters(&mut qb, d, query)?;
            qb.build_query_scalar()
                .fetch_one(pool)
                .await
                .map_err(|e| Error::database("counting dead letters", e))?
        });
        Ok(u64::try_from(count).unwrap_or(0))
    }

    /// Deletes the recorded dead letters matching `query` (its limit and order aside) and
    /// returns how many were deleted. Only the store's records go: no queue on the broker is
    /// touched.
    pub async fn purge_dead_letters(&self, query: &DeadLetterQuery) -> Result<u64, Error> {
        let deleted: u64 = with_pool!(self, |pool, d| {
            let mut qb = QueryBuilder::new("DELETE FROM dead_letters");
            sql::push_dead_filters(&mut qb, d, query)?;
            qb.build()
                .execute(pool)
                .await
                .map_err(|e| Error::database("purging dead letters", e))?
                .rows_affected()
        });
        Ok(deleted)
    }

    /// Deletes the dead letters of `ids` (those recorded; unknown ids are skipped). Returns how
    /// many were deleted.
    pub async fn purge_dead_letter_ids(&self, ids: &[DeadLetterId]) -> Result<u64, Error> {
        let mut deleted = 0;
        for chunk in ids.chunks(IDS_PER_STATEMENT) {
            deleted += with_pool!(self, |pool, d| {
                let mut qb = QueryBuilder::new("DELETE FROM dead_letters WHERE id IN (");
                push_id_list(&mut qb, d, chunk);
                qb.build()
                    .execute(pool)
                    .await
                    .map_err(|e| Error::database("purging dead letters", e))?
                    .rows_affected()
            });
        }
        Ok(deleted)
    }

    /// How many of `ids` are recorded dead letters.
    pub async fn count_dead_letter_ids(&self, ids: &[DeadLetterId]) -> Result<u64, Error> {
        let mut found = 0;
        for chunk in ids.chunks(IDS_PER_STATEMENT) {
            let n: i64 = with_pool!(self, |pool, d| {
                let mut qb = QueryBuilder::new("SELECT count(*) FROM dead_letters WHERE id IN (");
                push_id_list(&mut qb, d, chunk);
                qb.build_query_scalar()
                    .fetch_one(pool)
                    .await
                    .map_err(|e| Error::database("counting dead letters", e))?
            });
            found += u64::try_from(n).unwrap_or(0);
        }
        Ok(found)
    }

    /// A dead letter with the properties re-drive needs.
    pub(crate) async fn dead_letter_full(
        &self,
        id: DeadLetterId,
    ) -> Result<Option<(DeadLetterRecord, Option<String>, Option<i64>)>, Error> {
        let row: Option<DeadTuple> = with_pool!(self, |pool, d| {
            let mut qb = QueryBuilder::new(format!(
                "SELECT {} FROM dead_letters WHERE id = ",
                d.dead_columns
            ));
            qb.push_bind(id.to_string()).push(d.uuid);
            qb.build_query_as()
                .fetch_optional(pool)
                .await
                .map_err(|e| Error::database("reading a dead letter", e))?
        });
        row.map(dead_record).transpose()
    }

    /// One page of dead letters after `cursor`, with the properties re-drive needs.
    pub(crate) async fn dead_letter_page(
        &self,
        query: &DeadLetterQuery,
        cursor: Option<&DeadLetterRecord>,
        limit: usize,
    ) -> Result<Vec<(DeadLetterRecord, Option<String>, Option<i64>)>, Error> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let cursor = cursor
            .map(|c| -> Result<Cursor, Error> {
                Ok(Cursor {
                    time: crate::convert::time_to_text(c.dead_at)?,
                    id: c.id.to_string(),
                })
            })
            .transpose()?;
        let rows: Vec<DeadTuple> = with_pool!(self, |pool, d| {
            let mut qb = QueryBuilder::new(format!("SELECT {} FROM dead_letters", d.dead_columns));
            sql::push_dead_filters(&mut qb, d, query)?;
            sql::push_page(&mut qb, d, "dead_at", query.order, cursor.as_ref(), limit);
            qb.build_query_as()
                .fetch_all(pool)
                .await
                .map_err(|e| Error::database("listing dead letters", e))?
        });
        rows.into_iter().map(dead_record).collect()
    }

    /// Marks dead letters re-driven now (time, and one more in the count).
    pub(crate) async fn mark_redriven(&self, ids: &[DeadLetterId]) -> Result<(), Error> {
        let now = now_text();
        for chunk in ids.chunks(IDS_PER_STATEMENT) {
            with_pool!(self, |pool, d| {
                let mut qb = QueryBuilder::new("UPDATE dead_letters SET redriven_at = ");
                qb.push_bind(now.clone())
                    .push(d.time)
                    .push(", redrive_count = redrive_count + 1 WHERE id IN (");
                let mut list = qb.separated(", ");
                for id in chunk {
                    list.push_bind(id.to_string()).push_unseparated(d.uuid);
                }
                qb.push(")");
                qb.build()
                    .execute(pool)
                    .await
                    .map_err(|e| Error::database("marking dead letters re-driven", e))?;
            });
        }
        debug!(count = ids.len(), "dead letters marked re-driven");
        Ok(())
    }
}

/// What a [`Walk`] ended with.
struct Walked<R> {
    found: Vec<R>,
    /// Rows read.
    read: u64,
    /// The last row read, when the read limit stopped the walk.
    stopped_after: Option<(Timestamp, EventId)>,
}

/// A keyset walk over rows ordered by time, then id, for a query whose pattern the SQL only
/// narrows: pages are fetched until the limit is filled with matching rows, the rows run out,
/// or the query's read limit is reached (shared by [`Store::search`] and
/// [`Store::conflicts`]).
struct Walk<'q, R> {
    query: &'q EventQuery,
    /// Rows per page: when the matcher may drop rows, over-fetched so one page usually
    /// fills the limit.
    page: usize,
    /// The last row seen.
    cursor: Option<Cursor>,
    found: Vec<R>,
    /// Rows read so far.
    read: usize,
    /// The limit is filled or the rows ran out.
    done: bool,
}

impl<'q, R> Walk<'q, R> {
    fn new(query: &'q EventQuery) -> Result<Walk<'q, R>, Error> {
        let exact = query
            .pattern
            .as_deref()
            .is_none_or(|p| sql::key_prefilter(p).is_exact());
        // The page before ended on this event: start after it.
        let cursor = query
            .after
            .map(|(time, id)| -> Result<Cursor, Error> {
                Ok(Cursor {
                    time: crate::convert::time_to_text(time)?,
                    id: id.to_string(),
                })
            })
            .transpose()?;
        Ok(Walk {
            query,
            page: if exact {
                query.limit
            } else {
                query.limit.saturating_mul(2).clamp(200, 5000)
            },
            cursor,
            found: Vec::new(),
            read: 0,
            done: query.limit == 0,
        })
    }

    /// The rows the read limit still allows.
    fn readable(&self) -> usize {
        self.query
            .read_limit
            .map_or(usize::MAX, |limit| limit.saturating_sub(self.read))
    }

    /// Whether another page is wanted.
    fn more(&self) -> bool {
        !self.done && self.readable() > 0
    }

    /// Rows to fetch for the next page.
    fn page_size(&self) -> usize {
        self.page.min(self.readable())
    }

    /// Takes a fetched page of [`Walk::page_size`] rows at most: each row's `(time, id,
    /// routing key)` moves the cursor, and a row whose key the pattern matches becomes a
    /// record, until the limit.
    fn take<T>(
        &mut self,
        rows: Vec<T>,
        key: impl Fn(&T) -> (&String, &String, &String),
        record: impl Fn(T) -> Result<R, Error>,
    ) -> Result<(), Error> {
        self.done = rows.len() < self.page_size();
        for row in rows {
            self.read += 1;
            let (time, id, routing_key) = key(&row);
            self.cursor = Some(Cursor {
                time: time.clone(),
                id: id.clone(),
            });
            if sql::key_passes(self.query.pattern.as_deref(), routing_key) {
                self.found.push(record(row)?);
                if self.found.len() == self.query.limit {
                    self.done = true;
                    return Ok(());
                }
            }
        }
        Ok(())
    }

    /// What was found, how many rows were read, and where the read limit stopped the walk,
    /// if it did.
    fn finish(self) -> Result<Walked<R>, Error> {
        let stopped_after = match (&self.cursor, self.done) {
            (Some(cursor), false) => Some((
                time_from_text(&cursor.time)?,
                EventId::from_str(&cursor.id).map_err(|e| {
                    Error::corrupt(format!("stored id `{}`", cursor.id)).with_source(e)
                })?,
            )),
            _ => None,
        };
        Ok(Walked {
            found: self.found,
            read: u64::try_from(self.read).unwrap_or(u64::MAX),
            stopped_after,
        })
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

/// ` WHERE` the rollup's minute is from the one holding `since` to the one holding `until`.
fn push_minutes<'a, DB>(
    qb: &mut QueryBuilder<'a, DB>,
    d: &Dialect,
    since: Timestamp,
    until: Option<Timestamp>,
) -> Result<(), Error>
where
    DB: sqlx::Database,
    String: sqlx::Encode<'a, DB> + sqlx::Type<DB>,
{
    let minute_of = |time: Timestamp| -> Result<String, Error> {
        let text = time_to_text(time)?;
        Ok(format!("{}:00.000000Z", text.get(..16).unwrap_or(&text)))
    };
    qb.push(" WHERE minute >= ")
        .push_bind(minute_of(since)?)
        .push(d.time);
    if let Some(until) = until {
        qb.push(" AND minute <= ")
            .push_bind(minute_of(until)?)
            .push(d.time);
    }
    Ok(())
}

/// `id, id, …)`: the ids bound, each cast as the dialect's id (the list's `(` is the
/// caller's).
fn push_id_list<'a, DB>(qb: &mut QueryBuilder<'a, DB>, d: &Dialect, ids: &[DeadLetterId])
where
    DB: sqlx::Database,
    String: sqlx::Encode<'a, DB> + sqlx::Type<DB>,
{
    let mut list = qb.separated(", ");
    for id in ids {
        list.push_bind(id.to_string()).push_unseparated(d.uuid);
    }
    qb.push(")");
}
