//! The fair baseline of audit ingest: a minimal audit logger written by hand on the raw
//! client (amqprs) and sqlx, doing the durable work mesh-audit's logger does, so that the
//! ratio measures what mesh adds and not the database's work.
//!
//! What it shares with mesh's logger: the queue (declared by mesh, so its arguments are
//! mesh's), the prefetch ([`mesh_audit::DEFAULT_PREFETCH`]), batches of
//! [`mesh_audit::DEFAULT_BATCH_SIZE`] closed at that size or [`mesh_audit::DEFAULT_BATCH_WAIT`]
//! after their first delivery, one batch written while the next fills (so at most two are
//! unacked), each written in one transaction and acked only after its commit with one
//! `multiple` ack. It writes the same rows into the same tables with the same indexes: the
//! store is made by [`mesh_audit::Store::open`], whose migrations are the schema, so the two
//! cannot drift; SQLite in WAL mode with `synchronous = FULL` as the store opens it. Each row
//! goes into `events` (on PostgreSQL, whose `events` is partitioned by arrival, through
//! `event_ids` in the same statement, as the schema keeps each id once there), and each event
//! adds to its minute's row of `event_rollups` in the same transaction.
//!
//! What it leaves out, as a hand-written logger would: the dead-letter queue (mesh consumes
//! it too; it stays empty here), the contract's checks (owner of the key, identity), telling a
//! redelivery from a different event reusing an id (mesh's savepoint and count), metrics and
//! tracing, reconnects.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;

use amqprs::channel::{BasicAckArguments, Channel, ConsumerMessage};
use amqprs::{FieldTable, FieldValue};
use anyhow::Context;
use mesh_audit::{Store, StoreOptions, DEFAULT_BATCH_SIZE, DEFAULT_BATCH_WAIT, DEFAULT_PREFETCH};
use sqlx::QueryBuilder;
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;
use tokio::time::Instant;

use super::audit::{self, QUEUE};
pub(crate) use super::audit_db::{stored_time, Database};
use super::{patience, Ctx, Db, Run};
use crate::broker;
use crate::measure::Meter;
use crate::raw;

/// One event as the baseline stores it: the columns of `events`.
#[derive(Debug)]
struct Row {
    id: String,
    routing_key: String,
    source: String,
    node: String,
    time: String,
    causation_id: Option<String>,
    schema: Option<i64>,
    headers: String,
    body: String,
    publisher: Option<String>,
}

/// A header value as JSON: text as a string, integers as numbers, anything else as its text.
fn json(value: &FieldValue) -> serde_json::Value {
    match value {
        FieldValue::S(s) => serde_json::Value::from(s.as_ref().as_str()),
        FieldValue::t(b) => serde_json::Value::from(*b),
        FieldValue::I(n) => serde_json::Value::from(*n),
        FieldValue::l(n) => serde_json::Value::from(*n),
        FieldValue::i(n) => serde_json::Value::from(*n),
        other => serde_json::Value::from(other.to_string()),
    }
}

fn integer(value: &FieldValue) -> Option<i64> {
    match value {
        FieldValue::I(n) => Some(i64::from(*n)),
        FieldValue::i(n) => Some(i64::from(*n)),
        FieldValue::l(n) => Some(*n),
        FieldValue::s(n) => Some(i64::from(*n)),
        FieldValue::u(n) => Some(i64::from(*n)),
        FieldValue::b(n) => Some(i64::from(*n)),
        FieldValue::B(n) => Some(i64::from(*n)),
        _ => None,
    }
}

impl Row {
    /// The row of a delivery, and its delivery tag; an error for a message that is not an
    /// event (the baseline has no dead-letter path: the bench sends only events).
    fn of(message: ConsumerMessage) -> anyhow::Result<(u64, Row)> {
        let deliver = message.deliver.context("a delivery without its method")?;
        let properties = message
            .basic_properties
            .context("a delivery without properties")?;
        let body = String::from_utf8(message.content.unwrap_or_default())
            .context("the body is not UTF-8")?;
        let empty = FieldTable::new();
        let headers = properties.headers().unwrap_or(&empty);
        let (mut id, mut source, mut node, mut time, mut causation_id, mut schema) =
            (None, None, None, None, None, None);
        let mut object = serde_json::Map::new();
        for (name, value) in headers.as_ref() {
            let name: &String = name.as_ref();
            let name = name.as_str();
            let text = || match value {
                FieldValue::S(s) => Some(s.as_ref().to_owned()),
                _ => None,
            };
            match name {
                "x-event-id" => id = text(),
                "x-source" => source = text(),
                "x-node" => node = text(),
                "x-time" => time = text(),
                "x-causation-id" => causation_id = text(),
                "x-schema" => schema = integer(value),
                _ => {}
            }
            object.insert(name.to_owned(), json(value));
        }
        let id = uuid::Uuid::parse_str(&id.context("no x-event-id")?)?
            .hyphenated()
            .to_string();
        let time = OffsetDateTime::parse(&time.context("no x-time")?, &Rfc3339)?;
        Ok((
            deliver.delivery_tag(),
            Row {
                id,
                routing_key: deliver.routing_key().clone(),
                source: source.context("no x-source")?,
                node: node.context("no x-node")?,
                time: stored_time(time),
                causation_id,
                schema,
                headers: serde_json::Value::Object(object).to_string(),
                body,
                publisher: properties.user_id().cloned(),
            },
        ))
    }
}

/// The open batch: rows and the tag of its last delivery.
#[derive(Debug, Default)]
struct Batch {
    rows: Vec<Row>,
    last_tag: u64,
    opened: Option<Instant>,
}

/// What each event adds to the rollups: per (minute, key, source).
fn rollups(rows: &[Row]) -> BTreeMap<(String, &str, &str), i64> {
    let mut rollups = BTreeMap::new();
    for row in rows {
        // The stored time form is fixed-width: its first 16 characters name the minute.
        let Some(minute) = row.time.get(..16) else {
            continue;
        };
        let minute = format!("{minute}:00.000000Z");
        *rollups
            .entry((minute, row.routing_key.as_str(), row.source.as_str()))
            .or_default() += 1;
    }
    rollups
}

/// Binds a row's columns in `events`' order with the dialect's casts.
macro_rules! push_row {
    ($b:ident, $row:expr, $received:expr, $uuid:literal, $time:literal, $headers:literal, $body:literal) => {{
        let row: &Row = $row;
        $b.push_bind(row.id.as_str()).push_unseparated($uuid);
        $b.push_bind(row.routing_key.as_str());
        $b.push_bind(row.source.as_str());
        $b.push_bind(row.node.as_str());
        $b.push_bind(row.time.as_str()).push_unseparated($time);
        $b.push_bind(row.causation_id.as_deref());
        $b.push_bind(row.schema);
        $b.push_bind($received).push_unseparated($time);
        $b.push_bind(row.headers.as_str())
            .push_unseparated($headers);
        $b.push_bind(row.body.as_str()).push_unseparated($body);
        $b.push_bind(row.publisher.as_deref());
    }};
}

const COLUMNS: &str = "id, routing_key, source, node, time, causation_id, schema, received_at, \
                       headers, body, publisher";
const ROLLUP_UPSERT: &str = " ON CONFLICT (minute, routing_key, source) \
                             DO UPDATE SET events = event_rollups.events + excluded.events";

impl Database {
    /// Writes a batch in one transaction: its events (each id once) and their rollups.
    async fn write(&self, rows: &[Row]) -> anyhow::Result<()> {
        let received = stored_time(OffsetDateTime::now_utc());
        let received = received.as_str();
        let rollups = rollups(rows);
        match self {
            Database::Sqlite(pool) => {
                let mut tx = pool.begin().await?;
                let mut qb = QueryBuilder::new(format!("INSERT INTO events ({COLUMNS}) "));
                qb.push_values(rows, |mut b, row| {
                    push_row!(b, row, received, "", "", "", "");
                });
                qb.push(" ON CONFLICT (id) DO NOTHING");
                qb.build().execute(&mut *tx).await?;
                let mut qb = QueryBuilder::new(
                    "INSERT INTO event_rollups (minute, routing_key, source, events) ",
                );
                qb.push_values(&rollups, |mut b, ((minute, key, source), n)| {
                    b.push_bind(minute.as_str());
                    b.push_bind(*key);
                    b.push_bind(*source);
                    b.push_bind(*n);
                });
                qb.push(ROLLUP_UPSERT);
                qb.build().execute(&mut *tx).await?;
                tx.commit().await?;
            }
            Database::Postgres(pool) => {
                let mut tx = pool.begin().await?;
                let mut qb = QueryBuilder::new(format!("WITH v ({COLUMNS}) AS ("));
                qb.push_values(rows, |mut b, row| {
                    push_row!(
                        b,
                        row,
                        received,
                        "::uuid",
                        "::timestamptz",
                        "::jsonb",
                        "::json"
                    );
                });
                qb.push(
                    "), fresh AS (INSERT INTO event_ids (id, received_at) \
                     SELECT id, received_at FROM v ON CONFLICT (id) DO NOTHING RETURNING id) ",
                );
                qb.push(format!(
                    "INSERT INTO events ({COLUMNS}) SELECT v.* FROM v JOIN fresh USING (id)"
                ));
                qb.build().execute(&mut *tx).await?;
                let mut qb = QueryBuilder::new(
                    "INSERT INTO event_rollups (minute, routing_key, source, events) ",
                );
                qb.push_values(&rollups, |mut b, ((minute, key, source), n)| {
                    b.push_bind(minute.as_str())
                        .push_unseparated("::timestamptz");
                    b.push_bind(*key);
                    b.push_bind(*source);
                    b.push_bind(*n);
                });
                qb.push(ROLLUP_UPSERT);
                qb.build().execute(&mut *tx).await?;
                tx.commit().await?;
            }
        }
        Ok(())
    }
}

type Writing<'a> = Pin<Box<dyn Future<Output = anyhow::Result<u64>> + Send + 'a>>;

/// Commits a batch, then acks it with one `multiple` ack; returns its deliveries.
fn write<'a>(database: &'a Database, channel: &'a Channel, batch: Batch) -> Writing<'a> {
    Box::pin(async move {
        database.write(&batch.rows).await?;
        channel
            .basic_ack(BasicAckArguments::new(batch.last_tag, true))
            .await?;
        Ok(batch.rows.len() as u64)
    })
}

/// Consumes and stores until `events` deliveries are committed and acked.
async fn drain(
    database: &Database,
    consumer: &mut raw::RawConsumer,
    events: u64,
    acked: &mut u64,
) -> anyhow::Result<()> {
    let channel = consumer.channel.clone();
    let mut batch = Batch::default();
    let mut writing: Option<Writing<'_>> = None;
    let mut taken = 0_u64;
    while *acked < events {
        let due = batch
            .opened
            .is_some_and(|opened| opened + DEFAULT_BATCH_WAIT <= Instant::now());
        let close = !batch.rows.is_empty() && (batch.rows.len() >= DEFAULT_BATCH_SIZE || due);
        if close {
            // One batch written at a time: the next waits for it.
            if let Some(previous) = writing.take() {
                *acked += previous.await?;
            }
            writing = Some(write(database, &channel, std::mem::take(&mut batch)));
            continue;
        }
        let deadline = batch.opened.map_or_else(
            || Instant::now() + DEFAULT_BATCH_WAIT,
            |t| t + DEFAULT_BATCH_WAIT,
        );
        tokio::select! {
            done = async {
                match writing.as_mut() {
                    Some(writing) => writing.await,
                    None => std::future::pending().await,
                }
            }, if writing.is_some() => {
                writing = None;
                *acked += done?;
            }
            message = consumer.deliveries.recv(), if taken < events => {
                let message = message.context("the consumer's channel closed")?;
                if message.deliver.is_none() {
                    continue;
                }
                let (tag, row) = Row::of(message)?;
                batch.rows.push(row);
                batch.last_tag = tag;
                batch.opened.get_or_insert_with(Instant::now);
                taken += 1;
            }
            () = tokio::time::sleep_until(deadline), if batch.opened.is_some() => {}
        }
    }
    Ok(())
}

/// The baseline storing the backlog into a new store of `db`'s kind.
pub(crate) async fn run(ctx: &Ctx, db: Db) -> anyhow::Result<Run> {
    audit::declare(ctx).await?;
    audit::prefill(ctx, ctx.plan.audit_backlog).await?;
    let events = ctx.plan.audit_backlog;
    let temp = db.store().await?;
    // The schema is mesh-audit's own: its migrations make the tables and indexes.
    Store::open(StoreOptions::url(temp.url())?)
        .await?
        .close()
        .await;
    let database = Database::connect(db, temp.url()).await?;
    let connection = ctx.raw("audit-baseline").await?;
    let meter = Meter::start();
    let mut consumer = raw::consume(&connection, QUEUE, Some(DEFAULT_PREFETCH)).await?;
    let mut acked = 0;
    let drained = tokio::time::timeout(
        patience(events),
        drain(&database, &mut consumer, events, &mut acked),
    )
    .await;
    let cost = meter.finish();
    let _ = consumer.channel.close().await;
    broker::close(connection).await;
    let stored = database.count_events().await;
    database.close().await;
    drained
        .map_err(|_| anyhow::anyhow!("the baseline logger stalled at {acked} of {events}"))??;
    let stored = stored?;
    anyhow::ensure!(
        stored == events,
        "the baseline logger stored {stored} of {events} events"
    );
    broker::delete(&ctx.admin, QUEUE).await?;
    Ok(Run::rate("events/s", events, cost.wall.as_secs_f64(), cost))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_stored_fixed_width_in_utc() {
        let time = OffsetDateTime::parse("2026-12-07T14:03:04.5+01:00", &Rfc3339).unwrap();
        assert_eq!(stored_time(time), "2026-12-07T13:03:04.500000Z");
    }

    #[test]
    fn rollups_count_per_minute_key_and_source() {
        let row = |time: &str, key: &str| Row {
            id: String::new(),
            routing_key: key.to_owned(),
            source: "bench".to_owned(),
            node: "raw".to_owned(),
            time: time.to_owned(),
            causation_id: None,
            schema: None,
            headers: "{}".to_owned(),
            body: "{}".to_owned(),
            publisher: None,
        };
        let rows = [
            row("2026-12-07T13:03:04.500000Z", "a"),
            row("2026-12-07T13:03:59.000000Z", "a"),
            row("2026-12-07T13:04:00.000000Z", "a"),
            row("2026-12-07T13:03:10.000000Z", "b"),
        ];
        let counted: Vec<_> = rollups(&rows)
            .into_iter()
            .map(|((minute, key, _), n)| (minute, key.to_owned(), n))
            .collect();
        assert_eq!(
            counted,
            [
                ("2026-12-07T13:03:00.000000Z".to_owned(), "a".to_owned(), 2),
                ("2026-12-07T13:03:00.000000Z".to_owned(), "b".to_owned(), 1),
                ("2026-12-07T13:04:00.000000Z".to_owned(), "a".to_owned(), 1),
            ]
        );
    }
}
