//! The SQL both backends share, and where they differ.
//!
//! Values are bound as text, integers or bytes on both backends, and PostgreSQL casts them
//! to its column types (`$1::uuid`, `$2::timestamptz`, `$3::jsonb`); selected columns are
//! cast back to text in the stored time format, so one row mapping serves both.

use mesh_core::topic_matches;
use sqlx::{Database, Encode, QueryBuilder, Type};

use super::body::{self, BodyMatch};
use crate::convert::time_to_text;
use crate::error::Error;
use crate::record::{DeadLetterQuery, EventQuery, Order};

/// How one backend spells what differs.
#[derive(Debug)]
pub(crate) struct Dialect {
    /// Cast after a bound event or dead-letter id.
    pub(crate) uuid: &'static str,
    /// Cast after a bound time.
    pub(crate) time: &'static str,
    /// Cast after bound headers.
    pub(crate) headers: &'static str,
    /// Cast after an event's bound body.
    pub(crate) body: &'static str,
    /// The select list of an event, in [`super::rows::EventTuple`]'s order.
    pub(crate) event_columns: &'static str,
    /// The select list of a dead letter, in [`super::rows::DeadTuple`]'s order.
    pub(crate) dead_columns: &'static str,
    /// The select list of an id conflict, in [`super::rows::ConflictTuple`]'s order.
    pub(crate) conflict_columns: &'static str,
    /// An event's id as text (`RETURNING` it after an insert).
    pub(crate) id_text: &'static str,
    /// What tells stored events with one id apart: id, routing key, source, body as text.
    pub(crate) identity_columns: &'static str,
    /// A rollup's minute as stored time text.
    pub(crate) minute: &'static str,
    /// `events` is partitioned by arrival, each id kept once by `event_ids` (PostgreSQL,
    /// decision 0022).
    pub(crate) partitioned: bool,
    /// What ends an insert into `events` (see `write::insert_events`).
    pub(crate) on_conflict: &'static str,
    /// How a writing transaction begins; `None`: the driver's `BEGIN`. SQLite takes the
    /// write lock at `BEGIN IMMEDIATE`, waiting for it as long as the busy timeout allows: a
    /// deferred transaction that has read anything (the first insert on a connection reads
    /// the body index's configuration) cannot wait to become the writer, and fails at once
    /// with "database is locked" while another connection writes (see the store's docs).
    pub(crate) begin_write: Option<&'static str>,
    /// The inserted ids come back with the statement's answer at little cost (PostgreSQL),
    /// so a batch asks for them at once rather than in a savepoint tried first without
    /// them (SQLite, whose worker thread hands result rows one by one).
    pub(crate) cheap_returning: bool,
    /// How an event's body is searched (its full-text index).
    pub(crate) body_match: &'static BodyMatch,
    /// The comparison and the order the routing-key index is in (`text_pattern_ops` on
    /// PostgreSQL: bytewise, whatever the database's collation).
    pub(crate) key_after: &'static str,
    pub(crate) key_order: &'static str,
}

pub(crate) const SQLITE: Dialect = Dialect {
    uuid: "",
    time: "",
    headers: "",
    body: "",
    event_columns: "id, routing_key, source, node, time, causation_id, schema, received_at, \
                    headers, body, publisher",
    dead_columns: "id, event_id, routing_key, reason, attempts, last_error, queue, dead_at, \
                   received_at, content_type, message_id, amqp_timestamp, headers, body, \
                   redriven_at, redrive_count, user_id, untrusted",
    conflict_columns: "id, event_id, routing_key, source, node, time, causation_id, schema, \
                       received_at, headers, body, publisher",
    id_text: "id",
    identity_columns: "id, routing_key, source, body",
    minute: "minute",
    partitioned: false,
    on_conflict: " ON CONFLICT (id) DO NOTHING",
    begin_write: Some("BEGIN IMMEDIATE"),
    cheap_returning: false,
    body_match: &body::SQLITE,
    key_after: ">",
    key_order: "",
};

/// `to_char` in the stored time format, in UTC whatever the session's time zone.
macro_rules! pg_time {
    ($column:literal) => {
        concat!(
            "to_char(",
            $column,
            " AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')"
        )
    };
}

pub(crate) const POSTGRES: Dialect = Dialect {
    uuid: "::uuid",
    time: "::timestamptz",
    headers: "::jsonb",
    body: "::json",
    event_columns: concat!(
        "id::text, routing_key, source, node, ",
        pg_time!("time"),
        ", causation_id, schema::int8, ",
        pg_time!("received_at"),
        ", headers::text, body::text, publisher"
    ),
    dead_columns: concat!(
        "id::text, event_id::text, routing_key, reason, attempts::int8, last_error, queue, ",
        pg_time!("dead_at"),
        ", ",
        pg_time!("received_at"),
        ", content_type, message_id, amqp_timestamp, headers::text, body, ",
        pg_time!("redriven_at"),
        ", redrive_count::int8, user_id, untrusted"
    ),
    conflict_columns: concat!(
        "id::text, event_id::text, routing_key, source, node, ",
        pg_time!("time"),
        ", causation_id, schema::int8, ",
        pg_time!("received_at"),
        ", headers::text, body::text, publisher"
    ),
    id_text: "id::text",
    // `json` keeps the text as it came, so this is the body byte for byte.
    identity_columns: "id::text, routing_key, source, body::text",
    minute: pg_time!("minute"),
    partitioned: true,
    // `event_ids` decided which rows are new: the insert into `events` cannot conflict.
    on_conflict: "",
    begin_write: None,
    cheap_returning: true,
    body_match: &body::POSTGRES,
    key_after: "~>~",
    key_order: " USING ~<~",
};

/// Rows per `INSERT` statement, at most: a power of two (see [`statement_chunks`]). The
/// parameters stay well below SQLite's 32,766 and PostgreSQL's 65,535 (events bind 11 per
/// row, conflicts 13, dead letters 15).
pub(crate) const ROWS_PER_STATEMENT: usize = 512;

/// `rows` cut into statements of a power of two rows each, largest first (500 rows: 256,
/// 128, 64, 32, 16 and 4). A multi-row insert's text depends on its number of rows, and
/// preparing it costs SQLite about as much as running it: with these sizes a table is
/// written with at most ten texts, which each connection's statement cache (and
/// PostgreSQL's prepared statements) keep, where a text per size of batch would be prepared
/// anew for nearly every batch that closes on its wait.
pub(crate) fn statement_chunks<T>(mut rows: &[T]) -> impl Iterator<Item = &[T]> {
    std::iter::from_fn(move || {
        let len = rows.len().min(ROWS_PER_STATEMENT);
        // The largest power of two not above `len`; none when no row is left.
        let size = 1_usize << len.checked_ilog2()?;
        let (chunk, rest) = rows.split_at(size);
        rows = rest;
        Some(chunk)
    })
}

/// What SQL can decide about a routing key from a topic pattern, always a superset of what
/// the pattern matches (SQL `LIKE` cannot express `*` and `#`; see [`key_prefilter`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum KeyPrefilter {
    /// The pattern has no wildcard: it matches exactly this key (and SQL decides alone).
    Exact(String),
    /// The key starts with `prefix` followed by a `.`, or (when `or_equal`) is `prefix`.
    Prefix { prefix: String, or_equal: bool },
    /// The pattern starts with a wildcard: SQL cannot narrow it.
    Any,
}

impl KeyPrefilter {
    /// Whether SQL alone decides the match, so no row needs the matcher.
    pub(crate) fn is_exact(&self) -> bool {
        matches!(self, KeyPrefilter::Exact(_))
    }
}

/// The prefilter of a pattern: its literal words before the first wildcard. A `*` after them
/// needs one more word (`a.*` wants `a.` and more); a `#` needs zero or more (`a.#` matches
/// `a` itself).
pub(crate) fn key_prefilter(pattern: &str) -> KeyPrefilter {
    // RabbitMQ's split: the empty pattern has no words.
    let words: Vec<&str> = if pattern.is_empty() {
        Vec::new()
    } else {
        pattern.split('.').collect()
    };
    let Some(first_wildcard) = words.iter().position(|w| *w == "*" || *w == "#") else {
        return KeyPrefilter::Exact(pattern.to_owned());
    };
    if first_wildcard == 0 {
        return KeyPrefilter::Any;
    }
    KeyPrefilter::Prefix {
        prefix: words[..first_wildcard].join("."),
        or_equal: words[first_wildcard] == "#",
    }
}

/// `prefix` as a `LIKE` pattern matching `prefix.` and anything after, with `\` escaping.
fn like_prefix(prefix: &str) -> String {
    let mut like = String::with_capacity(prefix.len() + 3);
    for c in prefix.chars() {
        if matches!(c, '%' | '_' | '\\') {
            like.push('\\');
        }
        like.push(c);
    }
    like.push_str(".%");
    like
}

/// Whether a stored key passes the pattern (the matcher, after the prefilter).
pub(crate) fn key_passes(pattern: Option<&str>, key: &str) -> bool {
    pattern.is_none_or(|p| topic_matches(p, key))
}

/// The point after which the next page starts: (time, id) of the last row seen.
#[derive(Debug, Clone)]
pub(crate) struct Cursor {
    pub(crate) time: String,
    pub(crate) id: String,
}

/// ` WHERE …` for an event query (the pattern as its prefilter only), over `events` (a body
/// search needs its index; see [`push_conflict_filters`]).
pub(crate) fn push_event_filters<'a, DB>(
    qb: &mut QueryBuilder<'a, DB>,
    d: &Dialect,
    query: &EventQuery,
) -> Result<(), Error>
where
    DB: Database,
    String: Encode<'a, DB> + Type<DB>,
{
    qb.push(" WHERE 1 = 1");
    if let Some(keys) = &query.keys {
        if keys.is_empty() {
            qb.push(" AND 1 = 0");
        } else {
            qb.push(" AND routing_key IN (");
            let mut list = qb.separated(", ");
            for key in keys {
                list.push_bind(key.clone());
            }
            qb.push(")");
        }
    } else if let Some(pattern) = &query.pattern {
        match key_prefilter(pattern) {
            KeyPrefilter::Exact(key) => {
                qb.push(" AND routing_key = ").push_bind(key);
            }
            KeyPrefilter::Prefix { prefix, or_equal } => {
                let like = like_prefix(&prefix);
                if or_equal {
                    qb.push(" AND (routing_key = ")
                        .push_bind(prefix)
                        .push(" OR routing_key LIKE ")
                        .push_bind(like)
                        .push(" ESCAPE '\\')");
                } else {
                    qb.push(" AND routing_key LIKE ")
                        .push_bind(like)
                        .push(" ESCAPE '\\'");
                }
            }
            KeyPrefilter::Any => {}
        }
    }
    if let Some(source) = &query.source {
        qb.push(" AND source = ").push_bind(source.clone());
    }
    if let Some(node) = &query.node {
        qb.push(" AND node = ").push_bind(node.clone());
    }
    if let Some(since) = query.since {
        qb.push(" AND time >= ")
            .push_bind(time_to_text(since)?)
            .push(d.time);
    }
    if let Some(until) = query.until {
        qb.push(" AND time < ")
            .push_bind(time_to_text(until)?)
            .push(d.time);
    }
    if let Some(text) = &query.body {
        let m = d.body_match;
        qb.push(m.before)
            .push_bind((m.phrase)(body::checked(text)?))
            .push(m.after);
    }
    Ok(())
}

/// ` WHERE …` for an event query over `event_conflicts`, which has no body index: a body
/// search is refused.
pub(crate) fn push_conflict_filters<'a, DB>(
    qb: &mut QueryBuilder<'a, DB>,
    d: &Dialect,
    query: &EventQuery,
) -> Result<(), Error>
where
    DB: Database,
    String: Encode<'a, DB> + Type<DB>,
{
    if query.body.is_some() {
        return Err(Error::options(
            "a body search covers the stored events, not the id conflicts",
        ));
    }
    push_event_filters(qb, d, query)
}

/// ` WHERE …` for a dead-letter query.
pub(crate) fn push_dead_filters<'a, DB>(
    qb: &mut QueryBuilder<'a, DB>,
    d: &Dialect,
    query: &DeadLetterQuery,
) -> Result<(), Error>
where
    DB: Database,
    String: Encode<'a, DB> + Type<DB>,
{
    qb.push(" WHERE 1 = 1");
    if let Some(queue) = &query.queue {
        qb.push(" AND queue = ").push_bind(queue.clone());
    }
    if let Some(reason) = query.reason {
        qb.push(" AND reason = ")
            .push_bind(reason.as_str().to_owned());
    }
    if let Some(id) = query.event_id {
        qb.push(" AND event_id = ")
            .push_bind(id.to_string())
            .push(d.uuid);
    }
    if let Some(since) = query.since {
        qb.push(" AND dead_at >= ")
            .push_bind(time_to_text(since)?)
            .push(d.time);
    }
    if let Some(until) = query.until {
        qb.push(" AND dead_at < ")
            .push_bind(time_to_text(until)?)
            .push(d.time);
    }
    match query.redriven {
        Some(true) => {
            qb.push(" AND redriven_at IS NOT NULL");
        }
        Some(false) => {
            qb.push(" AND redriven_at IS NULL");
        }
        None => {}
    }
    Ok(())
}

/// ` AND (time, id) after the cursor` in the query's order, then ` ORDER BY … LIMIT n`.
pub(crate) fn push_page<'a, DB>(
    qb: &mut QueryBuilder<'a, DB>,
    d: &Dialect,
    time_column: &str,
    order: Order,
    cursor: Option<&Cursor>,
    limit: usize,
) where
    DB: Database,
    String: Encode<'a, DB> + Type<DB>,
    i64: Encode<'a, DB> + Type<DB>,
{
    let (op, direction) = match order {
        Order::Asc => (">", "ASC"),
        Order::Desc => ("<", "DESC"),
    };
    if let Some(cursor) = cursor {
        // A row-value comparison: both PostgreSQL and SQLite seek an index on (time, id) to
        // it, so a page deep into the rows reads only its own rows (an equivalent OR of
        // comparisons is a filter, and the pages before it would be scanned again).
        qb.push(format!(" AND ({time_column}, id) {op} ("))
            .push_bind(cursor.time.clone())
            .push(d.time)
            .push(", ")
            .push_bind(cursor.id.clone())
            .push(d.uuid)
            .push(")");
    }
    qb.push(format!(
        " ORDER BY {time_column} {direction}, id {direction} LIMIT "
    ))
    .push_bind(i64::try_from(limit).unwrap_or(i64::MAX));
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        #[test]
        fn statement_chunks_cover_the_rows_in_few_sizes(len in 0_usize..5_000) {
            let rows: Vec<usize> = (0..len).collect();
            let chunks: Vec<&[usize]> = statement_chunks(&rows).collect();
            // Every row once, in order.
            prop_assert_eq!(&chunks.concat(), &rows);
            for pair in chunks.windows(2) {
                prop_assert!(pair[0].len() >= pair[1].len(), "sizes grow: {:?}", chunks);
            }
            for chunk in &chunks {
                prop_assert!(chunk.len().is_power_of_two() && chunk.len() <= ROWS_PER_STATEMENT);
            }
            // One statement per full 512 rows, at most one per smaller power of two.
            let most = len / ROWS_PER_STATEMENT + (len % ROWS_PER_STATEMENT).count_ones() as usize;
            prop_assert_eq!(chunks.len(), most);
        }
    }

    #[test]
    fn prefilters_are_supersets() {
        assert_eq!(
            key_prefilter("module.a.b"),
            KeyPrefilter::Exact("module.a.b".into())
        );
        assert_eq!(key_prefilter(""), KeyPrefilter::Exact(String::new()));
        assert_eq!(key_prefilter("#"), KeyPrefilter::Any);
        assert_eq!(key_prefilter("*.a.b"), KeyPrefilter::Any);
        assert_eq!(
            key_prefilter("module.a.#"),
            KeyPrefilter::Prefix {
                prefix: "module.a".into(),
                or_equal: true
            }
        );
        assert_eq!(
            key_prefilter("module.*.b.#"),
            KeyPrefilter::Prefix {
                prefix: "module".into(),
                or_equal: false
            }
        );
        assert_eq!(like_prefix("a_b%c\\"), "a\\_b\\%c\\\\.%");
    }
}
