//! Audit ingest: the audit logger (`mesh-audit`, its default options: prefetch 1,000, batches
//! of 500 committed then acked) storing a backlog of `--audit-backlog` events into a new
//! SQLite file, then into a new PostgreSQL database (on the server of `MESH_TEST_PG_URL`, by
//! default the local one, which shares the machine's cores), against the hand-written
//! baseline logger doing the same durable work ([`super::audit_baseline`]); and, for where
//! the bound is, the raw client consuming the same backlog from the same queue with the same
//! prefetch, acking each and writing nothing.
//!
//! The logger's queue is bound to `#`, so it exists only during this scenario: it is
//! declared by a logger started and stopped at the beginning of each run and deleted at the
//! end, and the other scenarios' events never reach it. Both rates run from the start of
//! consuming (for the logger, from `run` on an opened store) to the last event (raw: its last
//! ack; logger: the last row counted as stored).

use std::sync::Arc;
use std::time::Duration;

use amqprs::channel::BasicAckArguments;
use anyhow::Context;
use mesh::amqp::AmqpTransport;
use mesh_audit::{AuditLogger, AuditOptions, Store, StoreOptions};
use mesh_testkit::TempStore;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::audit_db::Database;
use super::{patience, Ctx, Db, Run, EVENTS};
use crate::broker;
use crate::measure::{now_ns, Meter};
use crate::payload;
use crate::raw::{self, ConfirmChannel, Route};

const NODE: &str = "audit";
/// The logger's queue on node `audit`.
pub(crate) const QUEUE: &str = "audit.audit-logger.events";
const KEY: &str = "module.bench.audited";

/// A logger running on its own transport.
struct Running {
    logger: AuditLogger,
    transport: Arc<AmqpTransport>,
    shutdown: CancellationToken,
    task: JoinHandle<Result<(), mesh_audit::Error>>,
}

/// Opens the store at `url` and connects; nothing consumes yet.
async fn prepare(ctx: &Ctx, url: &str) -> anyhow::Result<(AuditLogger, Arc<AmqpTransport>)> {
    let store = Store::open(StoreOptions::url(url)?).await?;
    let logger = AuditLogger::new(store, AuditOptions::new().node(NODE));
    let options = ctx
        .broker
        .mesh_options(&ctx.vhost, ctx.kind, ctx.plan.in_flight, "audit");
    let transport = Arc::new(mesh::amqp::connect(options).await?);
    Ok((logger, transport))
}

fn spawn(logger: AuditLogger, transport: Arc<AmqpTransport>) -> Running {
    let shutdown = CancellationToken::new();
    let task = tokio::spawn({
        let logger = logger.clone();
        let transport = transport.clone();
        let shutdown = shutdown.clone();
        async move { logger.run(&*transport, &shutdown).await }
    });
    Running {
        logger,
        transport,
        shutdown,
        task,
    }
}

impl Running {
    async fn stop(self) -> anyhow::Result<()> {
        self.shutdown.cancel();
        let outcome = self.task.await;
        self.transport.close().await;
        self.logger.store().close().await;
        outcome??;
        Ok(())
    }
}

/// Lets the logger declare its queue (bound to `#`) and stops it.
pub(crate) async fn declare(ctx: &Ctx) -> anyhow::Result<()> {
    let db = Db::Sqlite.store().await?;
    let (logger, transport) = prepare(ctx, db.url()).await?;
    let running = spawn(logger, transport);
    let attached = tokio::time::timeout(Duration::from_secs(30), async {
        while running.transport.health().consumers_attached < 2 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    running.stop().await?;
    attached.context("the audit logger did not attach its consumers")?;
    Ok(())
}

/// Fills the logger's queue with `events` events.
pub(crate) async fn prefill(ctx: &Ctx, events: u64) -> anyhow::Result<()> {
    broker::purge(&ctx.admin, QUEUE).await?;
    let connection = ctx.raw("audit-prefill").await?;
    let publisher = ConfirmChannel::open(&connection, ctx.plan.in_flight).await?;
    let route = Route {
        exchange: EVENTS,
        key: KEY,
        mandatory: false,
    };
    for seq in 0..events {
        let (properties, body) = payload::raw_event(seq, now_ns())?;
        publisher.publish(route, properties, body, false).await?;
    }
    publisher.wait_all().await?;
    publisher.close().await;
    broker::close(connection).await;
    let depth = broker::depth(&ctx.admin, QUEUE).await?;
    anyhow::ensure!(depth == events, "the audit backlog is {depth} events");
    Ok(())
}

/// Raw: the same queue, the logger's prefetch, an ack per delivery.
pub(crate) async fn raw(ctx: &Ctx) -> anyhow::Result<Run> {
    declare(ctx).await?;
    prefill(ctx, ctx.plan.audit_backlog).await?;
    let events = ctx.plan.audit_backlog;
    let connection = ctx.raw("audit-consume").await?;
    let meter = Meter::start();
    let mut consumer = raw::consume(&connection, QUEUE, Some(mesh_audit::DEFAULT_PREFETCH)).await?;
    let mut received = 0_u64;
    let drained = tokio::time::timeout(patience(events), async {
        while let Some(message) = consumer.deliveries.recv().await {
            let Some(deliver) = message.deliver else {
                continue;
            };
            consumer
                .channel
                .basic_ack(BasicAckArguments::new(deliver.delivery_tag(), false))
                .await?;
            received += 1;
            if received == events {
                break;
            }
        }
        anyhow::Ok(())
    })
    .await;
    let cost = meter.finish();
    let _ = consumer.channel.close().await;
    broker::close(connection).await;
    drained.with_context(|| format!("raw audit consume stalled at {received} of {events}"))??;
    broker::delete(&ctx.admin, QUEUE).await?;
    Ok(Run::rate("events/s", events, cost.wall.as_secs_f64(), cost))
}

/// The audit logger into a store of its own: a new SQLite file or PostgreSQL database.
pub(crate) async fn mesh(ctx: &Ctx, db: Db) -> anyhow::Result<Run> {
    Ok(ingest(ctx, db, ctx.plan.audit_backlog).await?.0)
}

/// The audit logger storing `events` into a new store of `db`'s kind, closed again; the
/// store is returned for a look at what it holds, and gone when it drops.
pub(crate) async fn ingest(ctx: &Ctx, db: Db, events: u64) -> anyhow::Result<(Run, TempStore)> {
    declare(ctx).await?;
    prefill(ctx, events).await?;
    let store = db.store().await?;
    let (logger, transport) = prepare(ctx, store.url()).await?;
    let meter = Meter::start();
    let running = spawn(logger, transport);
    let stored = tokio::time::timeout(patience(events), async {
        while running.logger.stats().events_stored < events {
            if running.task.is_finished() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    let cost = meter.finish();
    let seen = running.logger.stats().events_stored;
    running.stop().await?;
    stored.map_err(|_| anyhow::anyhow!("the audit logger stalled at {seen} of {events}"))?;
    anyhow::ensure!(
        seen >= events,
        "the audit logger stopped at {seen} of {events}"
    );
    broker::delete(&ctx.admin, QUEUE).await?;
    let run = Run::rate("events/s", events, cost.wall.as_secs_f64(), cost);
    Ok((run, store))
}

/// How long ago the events a retention run finds in its store arrived.
const OLD: Duration = Duration::from_secs(5 * 24 * 3600);
/// The retention of the retention runs: the old events are all past it.
const RETAIN: Duration = Duration::from_secs(3 * 24 * 3600);

/// The audit logger ingesting the backlog into a store already holding as many events that
/// arrived five days ago (with an `x-time` of 1970), with `--retain 3d` (`retain`, removing
/// them meanwhile, between its batches) or without. Every backlog event must be stored, once;
/// with retention, some old ones must have been removed during the run, without none.
///
/// "Removed" is counted in the store after the run, by what is left of the old events: rows
/// of `events` on SQLite, ids of `event_ids` on PostgreSQL, which retention removes first, in
/// chunks (the logger's `rows_pruned` counts a partition's rows only when the whole partition
/// is dropped, after its last id: a run shorter than that removed ids but dropped nothing).
pub(crate) async fn retained(ctx: &Ctx, db: Db, retain: bool) -> anyhow::Result<Run> {
    use mesh::raw::{codec, Envelope, EventId, Headers, RoutingKey, Timestamp};
    declare(ctx).await?;
    prefill(ctx, ctx.plan.audit_backlog).await?;
    let events = ctx.plan.audit_backlog;
    let temp = db.store().await?;
    let store = Store::open(StoreOptions::url(temp.url())?).await?;
    let now = Timestamp::now();
    let arrived = now.checked_sub(OLD).context("five days ago")?;
    store.prepare_partitions(arrived, now).await?;
    let old_time = Timestamp::parse("1970-01-01T00:00:00Z")?;
    let key = RoutingKey::parse(KEY)?;
    let mut left = events;
    while left > 0 {
        let n = left.min(500);
        let batch: Vec<_> = (0..n)
            .map(|_| {
                codec::encode(&Envelope {
                    id: EventId::new(),
                    key: key.clone(),
                    source: "bench".to_owned(),
                    node: NODE.to_owned(),
                    time: old_time,
                    causation_id: None,
                    schema: None,
                    extra_headers: Headers::new(),
                    body: bytes::Bytes::from_static(b"{\"old\": true}"),
                })
            })
            .collect();
        store.record_events_arrived(&batch, arrived).await?;
        left -= n;
    }
    let options = AuditOptions::new()
        .node(NODE)
        .retain(retain.then(|| mesh_audit::Retention::new(RETAIN)));
    let logger = AuditLogger::new(store, options);
    let transport = Arc::new(
        mesh::amqp::connect(ctx.broker.mesh_options(
            &ctx.vhost,
            ctx.kind,
            ctx.plan.in_flight,
            "audit",
        ))
        .await?,
    );
    let meter = Meter::start();
    let running = spawn(logger, transport);
    let stored = tokio::time::timeout(patience(events), async {
        while running.logger.stats().events_stored < events && !running.task.is_finished() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    let cost = meter.finish();
    let stats = running.logger.stats();
    let store = running.logger.store().clone();
    // Every backlog event stored, once: counted by their x-time, after the old ones'.
    let recent = mesh_audit::EventQuery::new().since(Timestamp::parse("1971-01-01T00:00:00Z")?);
    let kept = store.count_events(&recent).await;
    running.stop().await?;
    stored.map_err(|_| {
        anyhow::anyhow!(
            "the audit logger stalled at {} of {events}",
            stats.events_stored
        )
    })?;
    let kept = kept?;
    anyhow::ensure!(kept == events, "{kept} of {events} backlog events stored");
    let database = Database::connect(db, temp.url()).await?;
    let left = database
        .arrived_before(arrived.as_offset_date_time() + time::Duration::hours(1))
        .await;
    database.close().await;
    let removed = events.saturating_sub(left?);
    eprintln!(
        "audit retention: {removed} of {events} old events removed during the run \
         (rows_pruned {}, retain {retain})",
        stats.rows_pruned
    );
    if retain {
        anyhow::ensure!(removed > 0, "no old event was removed during the run");
    } else {
        anyhow::ensure!(
            removed == 0,
            "{removed} old events removed without retention"
        );
    }
    broker::delete(&ctx.admin, QUEUE).await?;
    Ok(Run::rate("events/s", events, cost.wall.as_secs_f64(), cost))
}
