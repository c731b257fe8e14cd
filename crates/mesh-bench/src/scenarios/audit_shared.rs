//! Shared audit loggers: 1, 2 and 3 loggers (`AuditOptions::shared`, default options
//! otherwise: prefetch 1,000, batches of 500 committed then acked), each on a transport and
//! a connection pool of its own, consuming one backlog of `--audit-backlog` events from
//! `shared.audit-logger.events` into one new PostgreSQL database (on the server of
//! `MESH_TEST_PG_URL`, by default the local one, which shares the machine's cores). mesh
//! alone: the comparison is between the numbers of loggers.
//!
//! The shared queues are bound to `#`, so they exist only during a run: declared by a logger
//! started and stopped at its beginning, deleted at its end, and the other scenarios' events
//! never reach them. The rate runs from the loggers' start (stores opened, transports
//! connected) to the last event counted as stored, summed over the loggers; every event must
//! be stored once (the store's count equals the backlog).

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use mesh::amqp::AmqpTransport;
use mesh::raw::naming;
use mesh_audit::{AuditLogger, AuditOptions, Store, StoreOptions};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::{patience, Ctx, Db, Run, EVENTS};
use crate::broker;
use crate::measure::{now_ns, Meter};
use crate::payload;
use crate::raw::{ConfirmChannel, Route};

const KEY: &str = "module.bench.shared-audited";

/// A shared logger on its own transport and store.
struct Running {
    logger: AuditLogger,
    transport: Arc<AmqpTransport>,
    shutdown: CancellationToken,
    task: JoinHandle<Result<(), mesh_audit::Error>>,
}

async fn start(ctx: &Ctx, url: &str, n: usize) -> anyhow::Result<Running> {
    let store = Store::open(StoreOptions::url(url)?).await?;
    let logger = AuditLogger::new(
        store,
        AuditOptions::new()
            .node(format!("shared-bench{n}"))
            .shared(true),
    );
    let options = ctx
        .broker
        .mesh_options(&ctx.vhost, ctx.kind, ctx.plan.in_flight, "audit-shared");
    let transport = Arc::new(mesh::amqp::connect(options).await?);
    let shutdown = CancellationToken::new();
    let task = tokio::spawn({
        let (logger, transport, shutdown) = (logger.clone(), transport.clone(), shutdown.clone());
        async move { logger.run(&*transport, &shutdown).await }
    });
    Ok(Running {
        logger,
        transport,
        shutdown,
        task,
    })
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

/// Lets a shared logger declare both shared queues and stops it.
async fn declare(ctx: &Ctx, url: &str) -> anyhow::Result<()> {
    let running = start(ctx, url, 0).await?;
    let attached = tokio::time::timeout(Duration::from_secs(30), async {
        while running.transport.health().consumers_attached < 2 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    running.stop().await?;
    attached.context("the shared audit logger did not attach its consumers")?;
    Ok(())
}

async fn prefill(ctx: &Ctx, queue: &str) -> anyhow::Result<()> {
    broker::purge(&ctx.admin, queue).await?;
    let connection = ctx.raw("audit-shared-prefill").await?;
    let publisher = ConfirmChannel::open(&connection, ctx.plan.in_flight).await?;
    let route = Route {
        exchange: EVENTS,
        key: KEY,
        mandatory: false,
    };
    for seq in 0..ctx.plan.audit_backlog {
        let (properties, body) = payload::raw_event(seq, now_ns())?;
        publisher.publish(route, properties, body, false).await?;
    }
    publisher.wait_all().await?;
    publisher.close().await;
    broker::close(connection).await;
    let depth = broker::depth(&ctx.admin, queue).await?;
    anyhow::ensure!(
        depth == ctx.plan.audit_backlog,
        "the shared audit backlog is {depth} events"
    );
    Ok(())
}

/// `loggers` shared loggers storing the backlog into one new PostgreSQL database.
pub(crate) async fn mesh(ctx: &Ctx, loggers: usize) -> anyhow::Result<Run> {
    let queue = naming::shared_audit_queue();
    let temp = Db::Postgres.store().await?;
    declare(ctx, temp.url()).await?;
    prefill(ctx, &queue).await?;
    let events = ctx.plan.audit_backlog;
    let meter = Meter::start();
    let mut running = Vec::with_capacity(loggers);
    for n in 1..=loggers {
        running.push(start(ctx, temp.url(), n).await?);
    }
    let stored = || -> u64 { running.iter().map(|r| r.logger.stats().events_stored).sum() };
    let done = tokio::time::timeout(patience(events), async {
        while stored() < events && !running.iter().any(|r| r.task.is_finished()) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    let cost = meter.finish();
    let seen = stored();
    let shares: Vec<u64> = running
        .iter()
        .map(|r| r.logger.stats().events_stored)
        .collect();
    let check = Store::open(StoreOptions::url(temp.url())?).await?;
    let counted = check.counts().await.map(|c| c.events);
    check.close().await;
    for r in running {
        r.stop().await?;
    }
    done.map_err(|_| anyhow::anyhow!("the shared loggers stalled at {seen} of {events}"))?;
    anyhow::ensure!(
        seen == events && counted? == events,
        "the shared loggers stored {seen} of {events} ({shares:?})"
    );
    tracing::info!(loggers, ?shares, "shared audit ingest");
    broker::delete(&ctx.admin, &queue).await?;
    broker::delete(&ctx.admin, &naming::shared_audit_dead_queue()).await?;
    Ok(Run::rate("events/s", events, cost.wall.as_secs_f64(), cost))
}
