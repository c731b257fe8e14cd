//! The transactional outbox (`mesh-outbox`): from writing events in database transactions
//! to the broker's confirm of the relay's publish, against mesh's direct emit, in the same
//! round.
//!
//! Every event is the emit scenario's 256-byte persistent JSON event, emitted by module
//! `bench` under the name `outboxed` into a durable sink of the pass's queue type, so a
//! confirm means the event is in a queue, for the direct emits and the relay alike.
//!
//! - **Direct emit** (the reference): `emit_nowait` pipelined, `--in-flight` unconfirmed, as
//!   the emit scenario does, `--outbox-events` events.
//! - **Outbox throughput**: a relay (default options, a poll every 10 ms, or
//!   `--relay-poll-ms`) runs on a fresh database; the clock
//!   starts before the first transaction, which writes [`PER_TX`] events (`emit_all_in`) or
//!   one (`emit_outgoing_in`) and commits, one transaction after another, and stops when the
//!   relay has marked every event sent, which it does only after the broker confirmed it
//!   ([`Relay::relayed`], read every millisecond). Then the table must hold no unsent row and
//!   the sink exactly the events written.
//! - **Lag**: one event per transaction, started at a steady `--outbox-rate` (up to 32
//!   transactions at once, as an application's requests would), for `--outbox-lag-events`
//!   events, once every connection of the pool is open (a service's steady state);
//!   `committed/s` says whether the rate was held, and `commit p50/p99 ms` how long a
//!   transaction took from its `emit_outgoing_in` to its commit's return. The lag is the
//!   relay's own histogram, `mesh_outbox_relay_lag_seconds`, read through the bench's
//!   recorder: from the event's `x-time` (set when `emit_outgoing_in`
//!   prepares it, before the insert and the commit) to the confirms of the relay's round, so
//!   it includes the insert and the commit. `relay p50/p99 ms` is the relay's own part, per
//!   event: from its writer's commit return to its delivery from the sink, which a consumer
//!   without acks empties during the run (a quorum queue delivers an event once it committed
//!   it, when its confirm goes out). The reference is a direct emit at the same rate, timed
//!   from the call to `emit_nowait` to its confirm.
//!
//! Each outbox run has a database of its own: a new PostgreSQL database (created and dropped
//! with `psql` through `mesh_testkit::TempStore`, on the server of `MESH_TEST_PG_URL`,
//! default the local one) or a new SQLite file (WAL, synchronous full).

use std::collections::{HashMap, VecDeque};
use std::str::FromStr;
use std::time::Duration;

use anyhow::Context;
use futures::stream::FuturesUnordered;
use futures::StreamExt;
use hdrhistogram::Histogram;
use mesh::{Bus, Outgoing, PendingEmit};
use mesh_outbox::{Backend, EmitIn, Outbox, Relay, RelayOptions};
use sqlx::postgres::PgPoolOptions;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions};
use sqlx::Pool;
use tokio::time::Instant;

use super::{patience, Ctx, Db, Pacer, Run, EVENTS};
use crate::broker;
use crate::measure::{now_ns, Meter};
use crate::payload::{Body, Probe};
use crate::raw::{self, RawConsumer};

/// The sink every outboxed and directly emitted event lands in.
pub(crate) const SINK: &str = "bench.outbox";
const NODE: &str = "outbox";
const NAME: &str = "outboxed";
const KEY: &str = "module.bench.outboxed";
/// Events per transaction of the batched runs.
pub(crate) const PER_TX: u64 = 100;
/// Transactions in flight at once in the lag runs: PostgreSQL's commits here wait about 10 ms
/// for their WAL flush, so a steady 1,000/s needs a dozen at once (their flushes are shared).
const LAG_WRITERS: usize = 32;

/// Declares the sink (`mesh.events` exists: setup connected mesh first).
pub(crate) async fn setup(ctx: &Ctx) -> anyhow::Result<()> {
    broker::declare_bound(&ctx.admin, SINK, ctx.kind, EVENTS, KEY).await
}

/// Empties the sink, checking every event arrived once.
async fn empty_sink(ctx: &Ctx, expected: u64) -> anyhow::Result<()> {
    let purged = broker::purge(&ctx.admin, SINK).await?;
    anyhow::ensure!(
        purged == expected,
        "the outbox sink held {purged} events, {expected} were written"
    );
    Ok(())
}

fn outgoing(seq: u64) -> anyhow::Result<Outgoing> {
    Ok(Outgoing::json(NAME, &Body::new(seq, now_ns()))?)
}

async fn bus(ctx: &Ctx, name: &str) -> anyhow::Result<Bus> {
    ctx.start(ctx.bus(NODE, "bench"), name).await
}

/// The reference: pipelined direct emits of `--outbox-events` events.
pub(crate) async fn direct(ctx: &Ctx) -> anyhow::Result<Run> {
    let events = ctx.plan.outbox_events;
    let bus = bus(ctx, "outbox-direct").await?;
    let window = ctx.plan.in_flight;
    let meter = Meter::start();
    let mut pending: VecDeque<PendingEmit> = VecDeque::with_capacity(window);
    for seq in 0..events {
        if pending.len() >= window {
            if let Some(oldest) = pending.pop_front() {
                oldest.await.context("an emit failed")?;
            }
        }
        pending.push_back(bus.emit_nowait(outgoing(seq)?).await?);
    }
    for emit in pending {
        emit.await.context("an emit failed")?;
    }
    let cost = meter.finish();
    bus.drain().await?;
    empty_sink(ctx, events).await?;
    Ok(Run::rate("events/s", events, cost.wall.as_secs_f64(), cost))
}

/// The lag reference: direct emits at `--outbox-rate`, each timed to its confirm.
pub(crate) async fn direct_lag(ctx: &Ctx) -> anyhow::Result<Run> {
    let events = ctx.plan.outbox_lag_events;
    let bus = bus(ctx, "outbox-direct-lag").await?;
    let mut histogram = lag_histogram()?;
    let mut pending = FuturesUnordered::new();
    let meter = Meter::start();
    let mut pacer = Pacer::new(events, ctx.plan.outbox_rate);
    let mut paced = true;
    while paced || !pending.is_empty() {
        tokio::select! {
            seq = pacer.next(), if paced => match seq {
                Some(seq) => {
                    let started = Instant::now();
                    let emit = bus.emit_nowait(outgoing(seq)?).await?;
                    pending.push(async move { emit.await.map(|_| started.elapsed()) });
                }
                None => paced = false,
            },
            Some(done) = pending.next() => {
                let lag = done.context("an emit failed")?;
                let _ = histogram.record(nanos(lag));
            }
        }
    }
    let cost = meter.finish();
    bus.drain().await?;
    empty_sink(ctx, events).await?;
    Ok(lag_run(events, &histogram, cost))
}

/// The outbox's throughput on `db`, `per_tx` events per transaction.
pub(crate) async fn throughput(ctx: &Ctx, db: Db, per_tx: u64) -> anyhow::Result<Run> {
    let events = if per_tx > 1 {
        ctx.plan.outbox_events
    } else {
        ctx.plan.outbox_single_events
    };
    let store = db.store().await?;
    match db {
        Db::Postgres => {
            let pool = postgres_pool(store.url()).await?;
            throughput_on(ctx, pool, relay_options(ctx), events, per_tx).await
        }
        Db::Sqlite => {
            let pool = sqlite_pool(store.url()).await?;
            throughput_on(ctx, pool, relay_options(ctx), events, per_tx).await
        }
    }
}

/// The relay's lag on `db` at `--outbox-rate`, one event per transaction.
pub(crate) async fn lag(ctx: &Ctx, db: Db) -> anyhow::Result<Run> {
    let store = db.store().await?;
    match db {
        Db::Postgres => {
            let pool = postgres_pool(store.url()).await?;
            lag_on(ctx, pool, relay_options(ctx)).await
        }
        Db::Sqlite => {
            let pool = sqlite_pool(store.url()).await?;
            lag_on(ctx, pool, relay_options(ctx)).await
        }
    }
}

/// The library's defaults, but the poll interval of `--relay-poll-ms`. The database does not
/// matter: no commit wakes a relay, on either.
fn relay_options(ctx: &Ctx) -> RelayOptions {
    match ctx.plan.relay_poll {
        Some(poll) => RelayOptions::default().poll_interval(poll),
        None => RelayOptions::default(),
    }
}

/// Opens every connection `pool` may hold, at once, then lets them go idle: the lag runs
/// measure a service in its steady state, whose pool is open. From a cold pool, the first
/// hundred milliseconds' transactions open their connections all at once, and the relay's
/// reads wait behind them (about 150 ms for the first 100 events here, a p99 of their own).
async fn warm<DB: Backend>(pool: &Pool<DB>) -> anyhow::Result<()> {
    let size = pool.options().get_max_connections();
    let held = futures::future::try_join_all((0..size).map(|_| pool.acquire()))
        .await
        .context("opening the pool's connections before the lag run")?;
    drop(held);
    Ok(())
}

async fn postgres_pool(url: &str) -> anyhow::Result<sqlx::PgPool> {
    PgPoolOptions::new()
        .max_connections(LAG_WRITERS as u32 + 8)
        .connect(url)
        .await
        .context("connecting to the outbox's PostgreSQL database")
}

async fn sqlite_pool(url: &str) -> anyhow::Result<sqlx::SqlitePool> {
    let options = SqliteConnectOptions::from_str(url)?
        .journal_mode(SqliteJournalMode::Wal)
        .busy_timeout(Duration::from_secs(30));
    SqlitePoolOptions::new()
        .max_connections(4)
        .connect_with(options)
        .await
        .context("opening the outbox's SQLite file")
}

/// A bus, the outbox on `pool` and a relay through the bus, started and idle.
async fn start<DB: Backend>(
    ctx: &Ctx,
    pool: &Pool<DB>,
    options: RelayOptions,
    name: &str,
) -> anyhow::Result<(Bus, Outbox<DB>, Relay)> {
    let bus = bus(ctx, name).await?;
    let outbox = Outbox::new(pool.clone()).await?;
    let relay = outbox.start_relay([bus.clone()], options).await?;
    Ok((bus, outbox, relay))
}

/// After the relay stopped: drains the bus, checks nothing is left unsent and the sink holds
/// exactly `in_sink` events (those not consumed), and closes the pool.
async fn finish<DB: Backend>(
    ctx: &Ctx,
    bus: Bus,
    outbox: Outbox<DB>,
    events: u64,
    in_sink: u64,
) -> anyhow::Result<()> {
    bus.drain().await?;
    let counts = outbox.counts().await?;
    outbox.pool().close().await;
    anyhow::ensure!(
        counts.pending == 0 && counts.sent == events,
        "the outbox holds {} unsent and {} sent rows, {events} were written",
        counts.pending,
        counts.sent
    );
    empty_sink(ctx, in_sink).await
}

/// Waits until the relay has marked `events` sent (checked every millisecond).
async fn relayed(relay: &Relay, events: u64) -> anyhow::Result<()> {
    tokio::time::timeout(patience(events), async {
        while relay.relayed() < events {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    })
    .await
    .map_err(|_| {
        anyhow::anyhow!(
            "the relay stalled at {} of {events} events",
            relay.relayed()
        )
    })
}

async fn throughput_on<DB: Backend>(
    ctx: &Ctx,
    pool: Pool<DB>,
    options: RelayOptions,
    events: u64,
    per_tx: u64,
) -> anyhow::Result<Run> {
    let (bus, outbox, relay) = start(ctx, &pool, options, "outbox-relay").await?;
    let meter = Meter::start();
    let mut seq = 0;
    while seq < events {
        let batch: Vec<Outgoing> = (seq..events.min(seq + per_tx))
            .map(outgoing)
            .collect::<anyhow::Result<_>>()?;
        seq += batch.len() as u64;
        let mut tx = pool.begin().await?;
        if batch.len() == 1 {
            for one in batch {
                bus.emit_outgoing_in(&mut tx, one).await?;
            }
        } else {
            bus.emit_all_in(&mut tx, batch).await?;
        }
        tx.commit().await?;
    }
    let written = meter.finish().wall;
    let confirmed = relayed(&relay, events).await;
    let cost = meter.finish();
    relay.stop().await;
    let checked = finish(ctx, bus, outbox, events, events).await;
    confirmed?;
    checked?;
    let mut run = Run::rate("events/s", events, cost.wall.as_secs_f64(), cost);
    run.metrics
        .insert("committed/s", events as f64 / written.as_secs_f64());
    Ok(run)
}

async fn lag_on<DB: Backend>(
    ctx: &Ctx,
    pool: Pool<DB>,
    options: RelayOptions,
) -> anyhow::Result<Run> {
    let events = ctx.plan.outbox_lag_events;
    let (bus, outbox, relay) = start(ctx, &pool, options, "outbox-lag").await?;
    // The relay's own part: each event's delivery from the sink (a consumer without acks),
    // timed against its writer's commit return. A quorum queue delivers an event once it
    // committed it, which is when its confirm goes out.
    let tap_connection = ctx.raw("outbox-lag-tap").await?;
    let tap = tap(raw::consume(&tap_connection, SINK, None).await?, events);
    warm(&pool).await?;
    // The throughput runs' lags, and this relay's first empty round, are not this run's.
    let _ = crate::recorder::take();
    let meter = Meter::start();
    let mut pacer = Pacer::new(events, ctx.plan.outbox_rate);
    let mut writing = FuturesUnordered::new();
    let mut paced = true;
    let mut commits = lag_histogram()?;
    let mut committed_at: HashMap<u64, u64> = HashMap::with_capacity(events as usize);
    let write = |seq: u64| {
        let (pool, bus) = (&pool, &bus);
        async move {
            let one = outgoing(seq)?;
            let mut tx = pool.begin().await?;
            let started = Instant::now();
            bus.emit_outgoing_in(&mut tx, one).await?;
            tx.commit().await?;
            anyhow::Ok((seq, started.elapsed(), now_ns()))
        }
    };
    while paced || !writing.is_empty() {
        tokio::select! {
            seq = pacer.next(), if paced && writing.len() < LAG_WRITERS => match seq {
                Some(seq) => writing.push(write(seq)),
                None => paced = false,
            },
            Some(done) = writing.next() => {
                let (seq, took, at) = done?;
                let _ = commits.record(nanos(took));
                committed_at.insert(seq, at);
            }
        }
    }
    drop(writing);
    let written = meter.finish().wall;
    let confirmed = relayed(&relay, events).await;
    let cost = meter.finish();
    relay.stop().await;
    let lags = crate::recorder::take();
    let delivered = tokio::time::timeout(patience(events), tap)
        .await
        .map_err(|_| anyhow::anyhow!("the sink's consumer did not get every event"))
        .and_then(|joined| joined.context("the sink's consumer panicked")?);
    broker::close(tap_connection).await;
    // Every event was consumed: the sink must be empty.
    let checked = finish(ctx, bus, outbox, events, 0).await;
    confirmed?;
    checked?;
    let delivered = delivered?;
    let lags = lags.context("the relay's lag histogram is not recorded in this process")?;
    anyhow::ensure!(
        lags.len() == events,
        "the relay recorded {} lags for {events} events",
        lags.len()
    );
    let mut own = lag_histogram()?;
    for (seq, at) in &committed_at {
        let arrived = delivered
            .get(seq)
            .with_context(|| format!("event {seq} was committed and never delivered"))?;
        let _ = own.record(nanos(Duration::from_nanos(arrived.saturating_sub(*at))));
    }
    let mut run = lag_run(events, &lags, cost);
    run.metrics
        .insert("committed/s", events as f64 / written.as_secs_f64());
    let ms = |h: &Histogram<u64>, q: f64| h.value_at_quantile(q) as f64 / 1e6;
    run.metrics.insert("commit p50 ms", ms(&commits, 0.5));
    run.metrics.insert("commit p99 ms", ms(&commits, 0.99));
    run.metrics.insert("relay p50 ms", ms(&own, 0.5));
    run.metrics.insert("relay p99 ms", ms(&own, 0.99));
    Ok(run)
}

/// Consumes the sink until `events` events arrived: when each arrived, by its seq.
fn tap(
    mut consumer: RawConsumer,
    events: u64,
) -> tokio::task::JoinHandle<anyhow::Result<HashMap<u64, u64>>> {
    tokio::spawn(async move {
        let mut delivered = HashMap::with_capacity(events as usize);
        while (delivered.len() as u64) < events {
            let Some(message) = consumer.deliveries.recv().await else {
                break;
            };
            let at = now_ns();
            let Some(body) = message.content else {
                continue;
            };
            let seq = Probe::read(&body)?.seq;
            anyhow::ensure!(
                delivered.insert(seq, at).is_none(),
                "event {seq} was delivered twice"
            );
        }
        let _ = consumer.channel.close().await;
        anyhow::ensure!(
            delivered.len() as u64 == events,
            "the sink's consumer ended after {} of {events} events",
            delivered.len()
        );
        Ok(delivered)
    })
}

fn lag_histogram() -> anyhow::Result<Histogram<u64>> {
    // 1 µs to 60 s, 3 significant digits; recorded in nanoseconds.
    Ok(Histogram::new_with_bounds(1_000, 60_000_000_000, 3)?)
}

fn nanos(lag: Duration) -> u64 {
    u64::try_from(lag.as_nanos())
        .unwrap_or(u64::MAX)
        .clamp(1_000, 60_000_000_000)
}

fn lag_run(events: u64, histogram: &Histogram<u64>, cost: crate::measure::Cost) -> Run {
    let ms = |q: f64| histogram.value_at_quantile(q) as f64 / 1e6;
    Run {
        metrics: [
            ("p50 ms", ms(0.5)),
            ("p99 ms", ms(0.99)),
            ("max ms", ms(1.0)),
        ]
        .into_iter()
        .collect(),
        events,
        cost,
    }
}
