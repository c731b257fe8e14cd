//! The store: the audit trail and the dead letters, in SQLite or PostgreSQL.
//!
//! One `Store` type over either backend. Both have the same tables (`events`,
//! `event_conflicts`, `dead_letters`) and a full-text index of the bodies (decision 0030),
//! created by their own migrations (`migrations/sqlite`, `migrations/postgres`), embedded in
//! the binary and applied by [`Store::open`] ([`Store::open_existing`], for readers, checks
//! them and changes nothing). The SQL is shared ([`sql`]); only casts, select lists and the
//! body search's SQL differ.
//!
//! On SQLite (WAL) one connection writes at a time, and a writer waits for another for up
//! to the busy timeout (30 s). A transaction of several statements that writes (a batch:
//! events, conflicts, rollups, dead letters) begins `BEGIN IMMEDIATE`
//! (`Dialect::begin_write`), taking the write lock before anything else. A deferred `BEGIN`
//! is not enough even when the first statement is an insert: the first insert into `events`
//! on a connection connects the body index (FTS5), which reads its configuration first, and a
//! transaction that has read cannot wait to become the writer: SQLite answers "database is
//! locked" (`SQLITE_BUSY`) at once, whatever the busy timeout, rather than risk a deadlock.
//! A statement outside a transaction (a prune step's deletes, a purge, marking dead letters
//! re-driven) is a transaction of its own, which waits for the lock as it should. Any new
//! transaction that writes begins with `begin_write`.

mod body;
mod connect;
mod hint;
mod rows;
mod sql;
mod walk;

use std::collections::{HashMap, HashSet};

use mesh_core::{EventId, Timestamp};
use sqlx::QueryBuilder;
use tracing::info;

use crate::convert::{time_from_text, time_to_text};
use crate::error::{Error, ErrorKind};
use crate::options::{Backend, StoreOptions};
use crate::record::{
    CausationNode, CausationTree, ConflictRecord, Counts, EventQuery, EventRecord, Flow, Found,
    MAX_TREE_NODES,
};

use connect::{Pool, POSTGRES_MIGRATIONS, SQLITE_MIGRATIONS};
use rows::{conflict_record, event_record, ConflictTuple, EventTuple};
pub(crate) use rows::{now_text, DeadRow, EventRow};
use sql::{Cursor, Dialect, POSTGRES, SQLITE};
use walk::Walk;

pub use body::MAX_BODY_SEARCH;

/// Ids per `IN (…)` list.
const IDS_PER_STATEMENT: usize = 500;

/// The most keys a resolved pattern is searched key by key (`Store::search_merged`).
const MAX_MERGED_KEYS: usize = 32;

/// The most stored routing keys a wildcard pattern is resolved to (`Store::resolved`); a
/// store holding more walks the events instead, matching each.
const MAX_RESOLVED_KEYS: usize = 1_000;

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

// After `with_pool!`, which their bodies use.
mod dead;
mod prune;
mod write;

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
        let pool = connect::pool(&options, connect::Mode::Create).await?;
        let store = Store { pool, options };
        if let Err(e) = store.migrate().await {
            store.close().await;
            return Err(e);
        }
        if let Err(e) = store.prepare_partitions_ahead().await {
            store.close().await;
            return Err(e);
        }
        info!(store = %store.options.redacted_url(), backend = %store.backend(), "audit store open");
        Ok(store)
    }

    /// Connects to a store an audit logger made, creating and changing nothing (what the
    /// reading commands use): a missing SQLite file is an error with a hint, and so is a
    /// database without the store's tables ([`ErrorKind::NotFound`]) or with a schema of
    /// another version ([`ErrorKind::Migration`]). A SQLite URL's `mode=rwc` is ignored.
    pub async fn open_existing(options: StoreOptions) -> Result<Store, Error> {
        let pool = connect::pool(&options, connect::Mode::Existing).await?;
        let store = Store { pool, options };
        if let Err(e) = connect::check_schema(&store.pool, &store.options).await {
            store.close().await;
            return Err(e);
        }
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
        let resolved = self.resolved(query).await?;
        if let Some(keys) = resolved.as_ref().and_then(|q| q.keys.as_deref()) {
            if (2..=MAX_MERGED_KEYS).contains(&keys.len()) {
                if let Some(found) = self.search_merged(query, keys).await? {
                    return Ok(found);
                }
            }
        }
        self.walk(resolved.as_ref().unwrap_or(query)).await
    }

    /// A search of a few keys, one exact search per key (each reads at most a page, through
    /// the key index), merged in the query's order: a database asked for all of them at once
    /// (`IN`) reads every event of those keys to sort them, or walks the time index past
    /// every other event. `None` when a key's search was stopped by the read limit.
    async fn search_merged(
        &self,
        query: &EventQuery,
        keys: &[String],
    ) -> Result<Option<Found>, Error> {
        let mut events = Vec::new();
        let mut read = 0u64;
        for key in keys {
            let mut one = query.clone();
            one.keys = Some(vec![key.clone()]);
            let found = self.walk(&one).await?;
            if found.stopped_after.is_some() {
                return Ok(None);
            }
            read = read.saturating_add(found.read);
            events.extend(found.events);
        }
        events.sort_by_key(|e| (e.time, e.id));
        if query.order == crate::record::Order::Desc {
            events.reverse();
        }
        events.truncate(query.limit);
        Ok(Some(Found {
            events,
            read,
            stopped_after: None,
        }))
    }

    /// The keyset walk of [`Store::search`], for `query` as it is.
    async fn walk(&self, query: &EventQuery) -> Result<Found, Error> {
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

    /// `query` with its pattern resolved to the stored keys it matches, when it has a
    /// wildcard and the store holds at most [`MAX_RESOLVED_KEYS`] keys: SQL then selects
    /// exactly the matching events through the key index, where it could only narrow them by
    /// the pattern's literal prefix (and not at all for `*.*.paid`), so a pattern matching
    /// few events finds them without reading the others. `None`: the query as it is.
    async fn resolved(&self, query: &EventQuery) -> Result<Option<EventQuery>, Error> {
        let Some(pattern) = query.pattern.as_deref() else {
            return Ok(None);
        };
        if query.keys.is_some() || sql::key_prefilter(pattern).is_exact() {
            return Ok(None);
        }
        let keys = self.keys_at_most(MAX_RESOLVED_KEYS).await?;
        Ok(keys.map(|keys| {
            let mut query = query.clone();
            query.keys = Some(
                keys.into_iter()
                    .filter(|key| sql::key_passes(Some(pattern), key))
                    .collect(),
            );
            query
        }))
    }

    /// How many events match `query` (its limit and order aside).
    pub async fn count_events(&self, query: &EventQuery) -> Result<u64, Error> {
        let resolved = self.resolved(query).await?;
        let query = resolved.as_ref().unwrap_or(query);
        match query.pattern.as_deref() {
            Some(pattern) if query.keys.is_none() && !sql::key_prefilter(pattern).is_exact() => {
                Ok(self
                    .event_counts_by_key(query)
                    .await?
                    .into_iter()
                    .map(|(_, n)| n)
                    .sum())
            }
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

    /// The routing keys of the stored events that `pattern` matches (every key when `None`),
    /// by key. Skips through the key index, one probe per key stored, whatever the number
    /// of events (where [`Store::event_counts_by_key`] reads them all).
    pub async fn routing_keys(&self, pattern: Option<&str>) -> Result<Vec<String>, Error> {
        let keys = self.keys_up_to(None).await?;
        Ok(keys
            .into_iter()
            .filter(|key| sql::key_passes(pattern, key))
            .collect())
    }

    /// Every stored routing key, by key, unless there are more than `most`.
    async fn keys_at_most(&self, most: usize) -> Result<Option<Vec<String>>, Error> {
        let keys = self.keys_up_to(Some(most + 1)).await?;
        Ok((keys.len() <= most).then_some(keys))
    }

    /// The stored routing keys, by key, the first `limit` of them.
    async fn keys_up_to(&self, limit: Option<usize>) -> Result<Vec<String>, Error> {
        let limit = limit.map_or(String::new(), |n| format!(" LIMIT {n}"));
        let keys: Vec<String> = with_pool!(self, |pool, d| {
            let next = |after: &str| {
                format!(
                    "(SELECT routing_key FROM events {after} ORDER BY routing_key{} LIMIT 1)",
                    d.key_order
                )
            };
            let sql = format!(
                "WITH RECURSIVE k (key) AS (SELECT {} UNION ALL SELECT {} FROM k \
                 WHERE k.key IS NOT NULL) SELECT key FROM k WHERE key IS NOT NULL{limit}",
                next(""),
                next(&format!("WHERE routing_key {} k.key", d.key_after)),
            );
            sqlx::query_scalar(&sql)
                .fetch_all(pool)
                .await
                .map_err(|e| Error::database("listing routing keys", e))?
        });
        Ok(keys)
    }

    /// How many events match `query`, per routing key, by key.
    pub async fn event_counts_by_key(
        &self,
        query: &EventQuery,
    ) -> Result<Vec<(String, u64)>, Error> {
        let resolved = self.resolved(query).await?;
        let query = resolved.as_ref().unwrap_or(query);
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
                sql::push_conflict_filters(&mut qb, d, query)?;
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
